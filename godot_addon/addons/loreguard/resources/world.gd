@tool
@icon("../icon.svg")
class_name LoreguardWorld
extends Resource
## What every NPC shares: lore, world-wide canonical facts and rules, fallbacks, and the world
## state the game starts with. Sent as `world.load` (LoreguardClient.load_world).

## The world's id, e.g. "eldmoor"; `world.load` answers with it.
@export var id: String = ""
## Lore placed in every NPC's prompt.
@export_multiline var lore: String = ""
## Truths every NPC knows and none may contradict.
@export var canonical_facts: Array[LoreguardFact] = []
## Rules for every NPC, in order.
@export var rule_sets: Array[LoreguardRuleSet] = []

@export_group("Fallbacks")
## Lines per trigger reason; tried after the NPC's lines for the trigger.
@export var fallbacks_by_trigger: Array[LoreguardFallback] = []
## Lines for any trigger; tried after the NPC's, before `emergency_fallback`.
@export var fallbacks: PackedStringArray
## The last-resort line when no NPC or world fallback applies.
@export var emergency_fallback: String = "..."

@export_group("World state")
## World state the game starts with, e.g. {"weather": "rain"}.
@export var initial_state: Dictionary = {}
## Values for keys the game never set, when a rule needs them.
@export var state_defaults: Dictionary = {}
## State key -> how NPCs may talk about it, so a line that contradicts its current value fails:
## {"gate.north": {"subject": "north gate", "attribute": "state", "subject_aliases": ["gate"],
## "cues": ["is"], "values": {"closed": ["shut"], "open": []}}}.
@export var state_claims: Dictionary = {}

@export_group("People")
## The world's people by NPC id, known to every NPC: {"guard": {"name": "Brom", "role": "guard",
## "where": "at the north gate"}}. A line that names a role's holder otherwise, or gives a
## person another's role, fails like a contradicted fact.
@export var people: Dictionary = {}

@export_group("Economy")
## Each currency's worth in the smallest one: {"copper": 1, "silver": 10, "gold": 100}.
@export var currencies: Dictionary = {}
## World-state key of the player's purse, in the smallest currency; set it with set_state, and
## again once the game has settled a sale (LoreguardWorldIntent.payment_value()).
@export var purse: String = "player.purse"
## Whether money the player's line hands over ("Here's 5 silver") pays where no purse is set.
@export var payment_in_words: bool = false


func to_dict() -> Dictionary:
	return {
		"id": id,
		"lore": lore,
		"canonical_facts": LoreguardDict.to_dicts(canonical_facts),
		"rules": LoreguardRuleSet.flatten(rule_sets),
		"fallbacks": LoreguardFallback.to_wire(fallbacks_by_trigger, fallbacks),
		"emergency_fallback": emergency_fallback,
		"initial_state": initial_state.duplicate(),
		"state_defaults": state_defaults.duplicate(),
		"state_claims": state_claims.duplicate(true),
		"people": people.duplicate(true),
		"economy": {"currencies": currencies.duplicate(), "purse": purse, "payment_in_words": payment_in_words},
	}


## A world from a `world.load` body; its rules become one rule set named after the world.
static func from_dict(data: Dictionary) -> LoreguardWorld:
	var out := LoreguardWorld.new()
	out.id = data.get("id", "")
	out.lore = data.get("lore", "")
	for fact: Dictionary in data.get("canonical_facts", []):
		out.canonical_facts.append(LoreguardFact.from_dict(fact))
	if not data.get("rules", []).is_empty():
		out.rule_sets.append(LoreguardRuleSet.from_dicts(out.id + "_rules", data["rules"]))
	out.fallbacks_by_trigger = LoreguardFallback.list_from_wire(data, "world %s" % out.id)
	out.fallbacks = LoreguardDict.strings(data.get("fallbacks", {}), "generic")
	out.emergency_fallback = data.get("emergency_fallback", "...")
	out.initial_state = LoreguardDict.scalars(data.get("initial_state", {}))
	out.state_defaults = LoreguardDict.scalars(data.get("state_defaults", {}))
	out.state_claims = data.get("state_claims", {})
	out.people = data.get("people", {})
	var economy: Dictionary = data.get("economy", {})
	out.currencies = economy.get("currencies", {})
	out.purse = economy.get("purse", "player.purse")
	out.payment_in_words = economy.get("payment_in_words", false)
	return out
