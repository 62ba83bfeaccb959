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


func to_dict() -> Dictionary:
	return {"player": player, "npc": npc, "emotion": emotion}


static func from_dict(data: Dictionary) -> LoreguardExample:
	var out := LoreguardExample.new()
	out.player = data.get("player", "")
	out.npc = data.get("npc", "")
	out.emotion = data.get("emotion", "neutral")
	return out
