extends "res://tests/check_run.gd"
## Checks LoreguardMsgPack against vectors written by Python's `msgpack`.
## Usage: godot --headless --path godot_addon -s res://tests/test_msgpack.gd -- VECTORS.json
## Prints one line per failure and "N passed, M failed"; exits 1 if anything failed.


func _init() -> void:
	var args := OS.get_cmdline_user_args()
	if args.is_empty():
		push_error("usage: -- VECTORS.json")
		quit(2)
		return
	var text := FileAccess.get_file_as_string(args[0])
	var vectors: Variant = JSON.parse_string(text)
	if typeof(vectors) != TYPE_ARRAY:
		push_error("cannot read vectors from %s" % args[0])
		quit(2)
		return
	for vector: Dictionary in vectors:
		_check(vector)
	_check_unencodable()
	_finish()


func _check(vector: Dictionary) -> void:
	var name: String = vector["name"]
	var wire: PackedByteArray = String(vector["hex"]).hex_decode()
	var decoded := LoreguardMsgPack.decode(wire)
	if vector.has("error"):
		_expect(
			not decoded.ok and not decoded.error.is_empty(), name, "decoded %s instead of failing" % str(decoded.value)
		)
		return
	var expected: Variant = _typed(vector["value"])
	_expect(decoded.ok, name, "decode failed: %s" % decoded.error)
	if decoded.ok:
		var got := var_to_str(decoded.value)
		_expect(_same(decoded.value, expected), name, "decoded %s, expected %s" % [got, var_to_str(expected)])
	if vector.get("canonical", true):
		var encoded := LoreguardMsgPack.encode(expected)
		var why := "encoded %s, Python wrote %s" % [encoded.bytes.hex_encode(), vector["hex"]]
		_expect(encoded.ok and encoded.bytes == wire, name + " (encode)", why)


## The value a tagged JSON tree stands for: {"int": "-128"}, {"float": "<8 bytes hex>"}, ...
func _typed(tree: Dictionary) -> Variant:
	var tag: String = tree.keys()[0]
	var v: Variant = tree[tag]
	match tag:
		"nil":
			return null
		"bool":
			return bool(v)
		"int":
			return String(v).to_int()
		"float":
			var raw := String(v).hex_decode()
			raw.reverse()
			return raw.decode_double(0)
		"str":
			return String(v)
		"bin":
			return String(v).hex_decode()
		"array":
			var items: Array = []
			for item: Dictionary in v:
				items.append(_typed(item))
			return items
		"map":
			var out: Dictionary = {}
			for pair: Array in v:
				out[_typed(pair[0])] = _typed(pair[1])
			return out
	push_error("unknown tag %s" % tag)
	return null


## Equality that also compares types (1 is not 1.0, "a" is not its bytes) and float bits.
func _same(a: Variant, b: Variant) -> bool:
	if typeof(a) != typeof(b):
		return false
	match typeof(a):
		TYPE_FLOAT:
			var x := PackedByteArray()
			x.resize(16)
			x.encode_double(0, a)
			x.encode_double(8, b)
			return x.slice(0, 8) == x.slice(8, 16)
		TYPE_ARRAY:
			if a.size() != b.size():
				return false
			for i in a.size():
				if not _same(a[i], b[i]):
					return false
			return true
		TYPE_DICTIONARY:
			if a.keys().size() != b.keys().size():
				return false
			for key: Variant in a:
				if not b.has(key) or not _same(a[key], b[key]):
					return false
			return true
	return a == b


func _check_unencodable() -> void:
	for value: Variant in [Vector2(1, 2), Node.new(), Callable()]:
		var encoded := LoreguardMsgPack.encode(value)
		_expect(
			not encoded.ok and not encoded.error.is_empty(), "refuses %s" % type_string(typeof(value)), "encoded it"
		)
		if value is Node:
			value.free()
