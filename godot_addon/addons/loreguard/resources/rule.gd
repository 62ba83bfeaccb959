@tool
@icon("../icon.svg")
class_name LoreguardRule
extends Resource
## A designer expectancy rule: when its conditions hold, the sidecar puts `prompt_injection`
## into the prompt and enforces the checks on the model's line.
##
## prohibition: the NPC must not do it; requirement: it must; permission: it may.
## soft: retried, then accepted with a warning; hard: retried, then the authored fallback;
## critical: fallback at once.

## Unique among the rules an NPC gets; failures and audit records name it.
@export var id: String = ""
## prohibition: must not; requirement: must; permission: may.
@export_enum("prohibition", "requirement", "permission") var type: String = "prohibition"
## soft: retried, then accepted with a warning; hard: retried, then the fallback; critical: the fallback at once.
@export_enum("soft", "hard", "critical") var severity: String = "hard"
## What the rule is for, for designers and debug views.
@export var description: String = ""
## What the prompt tells the model, after the rule type's verb: a prohibition reads "Never:
## <this>", a requirement "Always: <this>", a permission "You may: <this>". So a prohibition
## names what is forbidden, e.g. "mention the dragon (the captain forbade all talk of it)".
@export_multiline var prompt_injection: String = ""
## Higher first when rules compete for the prompt.
@export_range(-1000, 1000) var priority: int = 0
## Shapes style only (soft, no truth checks); applied once designer feedback trusts it.
@export var behavioural: bool = false

@export_group("Conditions")
## Empty: any trigger. Otherwise only interactions with one of these trigger reasons.
@export var trigger_reasons: Array[LoreguardTrigger.Reason]
## Empty: any task. Otherwise only while the sidecar classifies the interaction as one of these:
## lore_question, quest, trade, small_talk, ambient, world_event, npc_exchange.
@export var task_types: PackedStringArray
## Empty: every NPC given this rule. Otherwise only these NPC ids.
@export var npc_ids: PackedStringArray
## Empty: any scene. Otherwise only these (LoreguardNPC.scene_name).
@export var scenes: PackedStringArray
## Applies when the interaction has at least one of these tags (empty: no condition).
@export var tags_any: PackedStringArray
## Applies only when the interaction has every one of these tags.
@export var tags_all: PackedStringArray
## -1: no bound.
@export var min_interaction: int = -1
## -1: no bound.
@export var max_interaction: int = -1
## World-state keys and the values they must have, e.g. {"alarm": true}.
@export var world_state: Dictionary = {}

@export_group("Checks")
## The line fails if it contains one (case-insensitive, on normalised text).
@export var forbidden_phrases: PackedStringArray
## Python regular expressions, matched case-insensitively.
@export var forbidden_patterns: PackedStringArray
## The line fails unless it contains each one (case-insensitive, on normalised text).
@export var required_phrases: PackedStringArray
## The line fails unless each matches (Python regular expressions, case-insensitive).
@export var required_patterns: PackedStringArray
## 0: no limit.
@export var max_length: int = 0
## Intent types the line must not carry while the rule applies.
@export var forbidden_intents: PackedStringArray
## Intent types the line must carry while the rule applies.
@export var required_intents: PackedStringArray
## Emotions the line must not show, e.g. "amused" at a funeral.
@export var forbidden_emotions: PackedStringArray
## Words that make a player's request one this rule forbids, e.g. "for free": a request worded
## in one is never granted, and the model is told which rule refuses it. Prohibitions only.
## One also in forbidden_phrases may be said to refuse ("Not for free."), a negation before it in its clause.
@export var forbidden_requests: PackedStringArray


func to_dict() -> Dictionary:
	var conditions := {
		"trigger_reasons": LoreguardTrigger.names(trigger_reasons),
		"task_types": Array(task_types),
		"npc_ids": Array(npc_ids),
		"scenes": Array(scenes),
		"tags_any": Array(tags_any),
		"tags_all": Array(tags_all),
		"world_state": world_state.duplicate(),
	}
	if min_interaction >= 0:
		conditions["min_interaction"] = min_interaction
	if max_interaction >= 0:
		conditions["max_interaction"] = max_interaction
	var checks := {
		"forbidden_phrases": Array(forbidden_phrases),
		"forbidden_patterns": Array(forbidden_patterns),
		"required_phrases": Array(required_phrases),
		"required_patterns": Array(required_patterns),
		"forbidden_intents": Array(forbidden_intents),
		"required_intents": Array(required_intents),
		"forbidden_emotions": Array(forbidden_emotions),
		"forbidden_requests": Array(forbidden_requests),
	}
	if max_length > 0:
		checks["max_length"] = max_length
	return {
		"id": id,
		"type": type,
		"severity": severity,
		"description": description,
		"prompt_injection": prompt_injection,
		"priority": priority,
		"behavioural": behavioural,
		"conditions": conditions,
		"checks": checks,
	}


static func from_dict(data: Dictionary) -> LoreguardRule:
	var out := LoreguardRule.new()
	out.id = data.get("id", "")
	out.resource_name = out.id  # the inspector lists arrays of rules by this
	out.type = data.get("type", "prohibition")
	out.severity = data.get("severity", "hard")
	out.description = data.get("description", "")
	out.prompt_injection = data.get("prompt_injection", "")
	out.priority = int(data.get("priority", out.priority))
	out.behavioural = data.get("behavioural", out.behavioural)
	var conditions: Dictionary = data.get("conditions", {})
	out.trigger_reasons = LoreguardTrigger.from_names(
		LoreguardDict.strings(conditions, "trigger_reasons"), "rule %s" % out.id
	)
	out.task_types = LoreguardDict.strings(conditions, "task_types")
	out.npc_ids = LoreguardDict.strings(conditions, "npc_ids")
	out.scenes = LoreguardDict.strings(conditions, "scenes")
	out.tags_any = LoreguardDict.strings(conditions, "tags_any")
	out.tags_all = LoreguardDict.strings(conditions, "tags_all")
	out.min_interaction = (
		int(conditions.get("min_interaction", -1)) if conditions.get("min_interaction") != null else -1
	)
	out.max_interaction = (
		int(conditions.get("max_interaction", -1)) if conditions.get("max_interaction") != null else -1
	)
	out.world_state = LoreguardDict.scalars(conditions.get("world_state", {}))
	var checks: Dictionary = data.get("checks", {})
	out.forbidden_phrases = LoreguardDict.strings(checks, "forbidden_phrases")
	out.forbidden_patterns = LoreguardDict.strings(checks, "forbidden_patterns")
	out.required_phrases = LoreguardDict.strings(checks, "required_phrases")
	out.required_patterns = LoreguardDict.strings(checks, "required_patterns")
	out.max_length = int(checks.get("max_length", 0)) if checks.get("max_length") != null else 0
	out.forbidden_intents = LoreguardDict.strings(checks, "forbidden_intents")
	out.required_intents = LoreguardDict.strings(checks, "required_intents")
	out.forbidden_emotions = LoreguardDict.strings(checks, "forbidden_emotions")
	out.forbidden_requests = LoreguardDict.strings(checks, "forbidden_requests")
	return out
