@tool
@icon("../icon.svg")
class_name LoreguardFact
extends Resource
## A canonical fact: designer truth that no NPC line, game write or memory mutation may change.

## Unique among the NPC's (or the world's) facts; audit records name it.
@export var id: String = ""
## The truth as the prompt states it, e.g. "The north gate closes at dusk."
@export_multiline var text: String = ""
## Structured claims the gate checks outputs against.
@export var claims: Array[LoreguardClaim] = []
## Labels for organising facts; they travel with the fact to the sidecar.
@export var tags: PackedStringArray


func to_dict() -> Dictionary:
	return {"id": id, "text": text, "claims": LoreguardDict.to_dicts(claims), "tags": Array(tags)}


static func from_dict(data: Dictionary) -> LoreguardFact:
	var out := LoreguardFact.new()
	out.id = data.get("id", "")
	out.resource_name = out.id  # the inspector lists arrays of facts by this
	out.text = data.get("text", "")
	for claim: Dictionary in data.get("claims", []):
		out.claims.append(LoreguardClaim.from_dict(claim))
	out.tags = LoreguardDict.strings(data, "tags")
	return out
