@tool
@icon("../icon.svg")
class_name LoreguardIntentParam
extends Resource
## One parameter of a world intent, e.g. `gate_id` of `open_gate`. The sidecar only approves
## intents whose parameters match exactly.

## The parameter's key in the intent's params, e.g. "gate_id".
@export var name: String = ""
## The value's type; the sidecar refuses any other.
@export_enum("string", "integer", "number", "boolean") var type: String = "string"
## Off: the model may leave it out.
@export var required: bool = true
## What the value means, shown to the model.
@export var description: String = ""
## For strings: the only values allowed. Empty: any string up to `max_length`.
@export var enum_values: PackedStringArray
## For strings: the longest value allowed.
@export_range(1, 512) var max_length: int = 64
@export_group("Numeric range")
## For numbers: on, values below `minimum` are refused.
@export var has_minimum: bool = false
## The smallest value allowed, when `has_minimum` is on.
@export var minimum: float = 0.0
## For numbers: on, values above `maximum` are refused.
@export var has_maximum: bool = false
## The largest value allowed, when `has_maximum` is on.
@export var maximum: float = 0.0


func to_dict() -> Dictionary:
	var out := {
		"type": type,
		"required": required,
		"description": description,
		"enum": Array(enum_values),
		"max_length": max_length,
	}
	if has_minimum:
		out["minimum"] = minimum
	if has_maximum:
		out["maximum"] = maximum
	return out


static func from_dict(param_name: String, data: Dictionary) -> LoreguardIntentParam:
	var out := LoreguardIntentParam.new()
	out.name = param_name
	out.resource_name = param_name  # the inspector lists arrays of params by this
	out.type = data.get("type", "string")
	out.required = data.get("required", out.required)
	out.description = data.get("description", "")
	out.enum_values = LoreguardDict.strings(data, "enum")
	out.max_length = int(data.get("max_length", out.max_length))
	out.has_minimum = data.get("minimum") != null
	out.minimum = float(data.get("minimum", 0.0)) if out.has_minimum else 0.0
	out.has_maximum = data.get("maximum") != null
	out.maximum = float(data.get("maximum", 0.0)) if out.has_maximum else 0.0
	return out
