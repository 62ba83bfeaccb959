@tool
@icon("../icon.svg")
class_name LoreguardSecret
extends Resource
## Something the NPC knows but must never reveal. Its text never enters a prompt; the gate
## blocks any line containing one of the markers (after normalising case and obfuscation).

## Unique among the NPC's secrets; a blocked line's failure names it.
@export var id: String = ""
## What the secret is (for designers and debug views; never shown to the model).
@export_multiline var text: String = ""
## What the prompt may name as off-limits, e.g. "the gate password". Empty: not mentioned.
@export var topic: String = ""
## Phrases whose appearance reveals the secret. Empty: the text itself.
@export var markers: PackedStringArray


func to_dict() -> Dictionary:
	return {"id": id, "text": text, "topic": topic, "markers": Array(markers)}


static func from_dict(data: Dictionary) -> LoreguardSecret:
	var out := LoreguardSecret.new()
	out.id = data.get("id", "")
	out.resource_name = out.id  # the inspector lists arrays of secrets by this
	out.text = data.get("text", "")
	out.topic = data.get("topic", "")
	out.markers = LoreguardDict.strings(data, "markers")
	return out
