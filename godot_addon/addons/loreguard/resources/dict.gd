class_name LoreguardDict
extends RefCounted
## Helpers shared by the designer resources' `to_dict` / `from_dict`: the wire wants plain
## Arrays and Dictionaries, and JSON (which the importer reads) has only float numbers.


static func strings(data: Dictionary, key: String) -> PackedStringArray:
	var out := PackedStringArray()
	for item: Variant in data.get(key, []):
		out.append(str(item))
	return out


## JSON scalars as the wire should carry them: integral floats back to ints (JSON has no ints
## in Godot's parser), everything else unchanged.
static func scalar(value: Variant) -> Variant:
	if value is float and is_finite(value) and value == floorf(value) and absf(value) < 9.0e15:
		return int(value)
	return value


static func scalars(data: Variant) -> Dictionary:
	var out := {}
	if data is Dictionary:
		for key: Variant in data:
			out[str(key)] = scalar(data[key])
	return out


static func to_dicts(resources: Array) -> Array:
	var out: Array = []
	for resource: Variant in resources:
		if resource != null:
			out.append(resource.to_dict())
	return out
