class_name LoreguardWorldIntent
extends RefCounted
## An approved request for the game to act, e.g. `open_gate` with {"gate_id": "north"}: one
## entry of a reply's `intents` (the wire's WorldIntent). Not to be confused with
## LoreguardIntent, the designer resource that declares which intents an NPC may ask for.

## The intent's type, one the NPC's profile allows (LoreguardIntent.type).
var type: String = ""
## Its parameters: names to bool, int, float or String values, as the profile declares them.
var params: Dictionary = {}


## Reads one wire intent; a missing or malformed `params` becomes {}.
static func from_dict(data: Dictionary) -> LoreguardWorldIntent:
	var out := LoreguardWorldIntent.new()
	out.type = str(data.get("type", ""))
	out.params = data.get("params") if data.get("params") is Dictionary else {}
	return out


func _to_string() -> String:
	return "%s%s" % [type, JSON.stringify(params)]
