@tool
@icon("../icon.svg")
class_name LoreguardClaim
extends Resource
## A machine-checkable statement inside a canonical fact: `subject.attribute = value`
## (e.g. king.name = Arthur). The sidecar's gate catches lines that assert another value.

## What the claim is about, e.g. "king".
@export var subject: String = ""
## Which property of the subject, e.g. "name".
@export var attribute: String = ""
## The true value, e.g. "Arthur"; a line that asserts another one fails the canonical gate.
@export var value: String = ""
## Other names for the subject ("his majesty").
@export var subject_aliases: PackedStringArray
## Other spellings of the value that are not a contradiction.
@export var value_aliases: PackedStringArray
## Phrases that introduce the value after the subject ("is named"); empty: the defaults.
@export var cues: PackedStringArray
## Other values the attribute could take ("dawn", "all night"): a line naming the subject and one
## of these contradicts the fact even without a cue ("the gate stays open all night").
@export var other_values: PackedStringArray
## For a name: phrases that, after another name, say it holds the subject's place ("rules",
## "sits on the throne"): with these, "Edward rules" contradicts king.name = Arthur.
@export var role_cues: PackedStringArray


func to_dict() -> Dictionary:
	return {
		"subject": subject,
		"attribute": attribute,
		"value": value,
		"subject_aliases": Array(subject_aliases),
		"value_aliases": Array(value_aliases),
		"cues": Array(cues),
		"other_values": Array(other_values),
		"role_cues": Array(role_cues),
	}


static func from_dict(data: Dictionary) -> LoreguardClaim:
	var out := LoreguardClaim.new()
	out.subject = data.get("subject", "")
	out.attribute = data.get("attribute", "")
	out.value = data.get("value", "")
	out.subject_aliases = LoreguardDict.strings(data, "subject_aliases")
	out.value_aliases = LoreguardDict.strings(data, "value_aliases")
	out.cues = LoreguardDict.strings(data, "cues")
	out.other_values = LoreguardDict.strings(data, "other_values")
	out.role_cues = LoreguardDict.strings(data, "role_cues")
	return out
