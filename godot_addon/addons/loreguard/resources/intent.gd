@tool
@icon("../icon.svg")
class_name LoreguardIntent
extends Resource
## A world intent the NPC may ask the game for, e.g. `open_gate(gate_id)`. The model can only
## emit the intents listed here, and the game only receives the ones the sidecar approved.

## The intent's name, e.g. "open_gate"; LoreguardNPC.route() and the reply's intents use it.
@export var type: String = ""
## What the intent does, shown to the model so it knows when to ask for it.
@export var description: String = ""
## Its parameters (at most 8); an intent whose parameters do not match is not approved.
@export var params: Array[LoreguardIntentParam] = []
## Phrases with which a player asks for it ("open the gate", "let me in"). With cues, the
## intent is offered to the model only when the player's line says one (and names a value of
## each enum parameter), its parameters filled in from the line, and the sidecar approves
## nothing else; without, the model may emit it on any turn.
@export var cues: PackedStringArray = []
## Phrases with which the NPC says it does the act now ("go on through", "here's your"). A reply
## that says one (not negated, in no question, under no "if" or "when") must grant this intent,
## or the sidecar refuses it and asks again: the game would not do what the player heard.
@export var grant_phrases: PackedStringArray = []
## Who decides a request: "character" (the model, in character: the guard may or may not believe
## "the captain sent me") or "rules" (the sidecar, from `wares`, `requires`, the player's purse
## and the rules in force; the model only says the outcome). Only an intent with cues.
@export_enum("character", "rules") var decided_by: String = "character"
## What the intent hands over and at what price, by the value of its one enum parameter with
## several values: {"rope": {"price": 2, "currency": "silver"}, "lantern": {"price": 5,
## "currency": "silver", "stock": "merchant.lanterns"}}. Every value needs one; `stock` names the
## world-state key counting what is left (omit it for wares that never run out).
@export var wares: Dictionary = {}
## World-state keys and the values they must have for the rules to grant a request, e.g.
## {"alarm": false}.
@export var requires: Dictionary = {}
## Why a request is declined when a `requires` key does not hold, in words the player may hear:
## {"curfew": "the gate is barred from dusk until dawn"}. A key without words is told as itself.
@export var requires_words: Dictionary = {}
## The world state the act leaves, e.g. {"gate.north": "open"}: the game sets it when it acts
## (`Loreguard.set_state`), and until then a reply may speak of the act as done.
@export var changes: Dictionary = {}
## Lines said with a sale the rules made when every reply of the model's was refused (the sale
## still happens).
@export var sold_lines: PackedStringArray
## Lines said with a request the rules declined when every reply of the model's was refused.
@export var declined_lines: PackedStringArray


func to_dict() -> Dictionary:
	var by_name := {}
	for param in params:
		if param != null:
			by_name[param.name] = param.to_dict()
	return {
		"type": type,
		"description": description,
		"params": by_name,
		"cues": Array(cues),
		"grant_phrases": Array(grant_phrases),
		"decided_by": decided_by,
		"wares": wares.duplicate(true),
		"requires": requires.duplicate(),
		"requires_words": requires_words.duplicate(),
		"changes": changes.duplicate(),
		"deal_lines": {"sold": Array(sold_lines), "declined": Array(declined_lines)},
	}


static func from_dict(data: Dictionary) -> LoreguardIntent:
	var out := LoreguardIntent.new()
	out.type = data.get("type", "")
	out.resource_name = out.type  # the inspector lists arrays of intents by this
	out.description = data.get("description", "")
	out.cues = PackedStringArray(data.get("cues", []))
	out.grant_phrases = PackedStringArray(data.get("grant_phrases", []))
	out.decided_by = data.get("decided_by", "character")
	out.wares = data.get("wares", {})
	out.requires = LoreguardDict.scalars(data.get("requires", {}))
	out.requires_words = data.get("requires_words", {})
	out.changes = LoreguardDict.scalars(data.get("changes", {}))
	var lines: Dictionary = data.get("deal_lines", {})
	if not lines.get("sold", []).is_empty():  # left at its default, an inspector shows no revert arrow
		out.sold_lines = PackedStringArray(lines["sold"])
	if not lines.get("declined", []).is_empty():
		out.declined_lines = PackedStringArray(lines["declined"])
	var params_data: Dictionary = data.get("params", {})
	var names := params_data.keys()
	names.sort()
	for param_name: String in names:
		out.params.append(LoreguardIntentParam.from_dict(param_name, params_data[param_name]))
	return out
