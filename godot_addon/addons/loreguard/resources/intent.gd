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
	}


static func from_dict(data: Dictionary) -> LoreguardIntent:
	var out := LoreguardIntent.new()
	out.type = data.get("type", "")
	out.resource_name = out.type  # the inspector lists arrays of intents by this
	out.description = data.get("description", "")
	out.cues = PackedStringArray(data.get("cues", []))
	out.grant_phrases = PackedStringArray(data.get("grant_phrases", []))
	var params_data: Dictionary = data.get("params", {})
	var names := params_data.keys()
	names.sort()
	for param_name: String in names:
		out.params.append(LoreguardIntentParam.from_dict(param_name, params_data[param_name]))
	return out
