@tool
@icon("../icon.svg")
class_name LoreguardExample
extends Resource
## A few-shot example: how this NPC answers a player line.

## What the player says.
@export_multiline var player: String = ""
## The NPC's answer, exactly as the model should write it (dialogue only).
@export_multiline var npc: String = ""
## The emotion the answer shows.
@export_enum("neutral", "happy", "sad", "angry", "afraid", "surprised", "suspicious", "amused")
var emotion: String = "neutral"
## The world intent this answer grants (one of the NPC's intents; empty: none): shows the model
## what granting a request looks like.
@export var intent_type: String = ""
## The granted intent's parameters, e.g. {"gate_id": "north"}.
@export var intent_params: Dictionary = {}


func to_dict() -> Dictionary:
	var out := {"player": player, "npc": npc, "emotion": emotion}
	if not intent_type.is_empty():
		out["intent"] = {"type": intent_type, "params": intent_params}
	return out


static func from_dict(data: Dictionary) -> LoreguardExample:
	var out := LoreguardExample.new()
	out.player = data.get("player", "")
	out.npc = data.get("npc", "")
	out.emotion = data.get("emotion", "neutral")
	var intent: Dictionary = data.get("intent", {}) if data.get("intent") is Dictionary else {}
	out.intent_type = intent.get("type", "")
	var params: Dictionary = intent.get("params", {})
	for key: String in params:
		var value: Variant = params[key]
		# JSON has one number type: a whole number is an integer parameter's value
		if value is float and value == floorf(value):
			value = int(value)
		out.intent_params[key] = value
	return out
