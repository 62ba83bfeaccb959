class_name LoreguardMsgPack
extends RefCounted
## MessagePack for the Loreguard protocol, written for exactness.
##
## Integers keep every width: encoding picks the smallest form, decoding reads each form with its
## own sign (so 128 is 128, not -128). Floats are always float64 on the wire. Strings are `str`,
## PackedByteArray is `bin`. GDScript's int is signed 64-bit, so an unsigned value above
## 2^63 - 1 cannot be held: decoding it is an error, never a wrapped number. Extension types,
## invalid UTF-8, truncated input, trailing bytes and nesting deeper than MAX_DEPTH are errors.

const MAX_DEPTH := 64


## The outcome of `decode`: `ok` with a `value`, or not `ok` with an `error` message.
class Decoded:
	extends RefCounted
	var ok: bool = false
	var value: Variant = null
	var error: String = ""


## The outcome of `encode`: `ok` with `bytes`, or not `ok` with an `error` message.
class Encoded:
	extends RefCounted
	var ok: bool = false
	var bytes: PackedByteArray = PackedByteArray()
	var error: String = ""


static func encode(value: Variant) -> Encoded:
	var out := Encoded.new()
	var buffer := PackedByteArray()
	var error := _write(buffer, value, 0)
	if error.is_empty():
		out.ok = true
		out.bytes = buffer
	else:
		out.error = error
	return out


static func decode(bytes: PackedByteArray) -> Decoded:
	var reader := _Reader.new(bytes)
	var out := Decoded.new()
	var value: Variant = reader.read(0)
	if reader.error.is_empty() and reader.pos != bytes.size():
		reader.error = "%d trailing bytes after the value" % (bytes.size() - reader.pos)
	if reader.error.is_empty():
		out.ok = true
		out.value = value
	else:
		out.error = reader.error
	return out


# --- encoding ---------------------------------------------------------------------------------


static func _put_uint(buffer: PackedByteArray, value: int, width: int) -> void:
	for i in range(width - 1, -1, -1):
		buffer.append((value >> (8 * i)) & 0xFF)


static func _write_int(buffer: PackedByteArray, value: int) -> void:
	if value >= 0:
		if value < 0x80:
			buffer.append(value)
		elif value <= 0xFF:
			buffer.append(0xCC)
			_put_uint(buffer, value, 1)
		elif value <= 0xFFFF:
			buffer.append(0xCD)
			_put_uint(buffer, value, 2)
		elif value <= 0xFFFFFFFF:
			buffer.append(0xCE)
			_put_uint(buffer, value, 4)
		else:
			buffer.append(0xCF)
			_put_uint(buffer, value, 8)
	elif value >= -32:
		buffer.append(value & 0xFF)
	elif value >= -0x80:
		buffer.append(0xD0)
		_put_uint(buffer, value, 1)
	elif value >= -0x8000:
		buffer.append(0xD1)
		_put_uint(buffer, value, 2)
	elif value >= -0x80000000:
		buffer.append(0xD2)
		_put_uint(buffer, value, 4)
	else:
		buffer.append(0xD3)
		_put_uint(buffer, value, 8)


static func _write_float(buffer: PackedByteArray, value: float) -> void:
	var raw := PackedByteArray()
	raw.resize(8)
	raw.encode_double(0, value)
	raw.reverse()  # the wire is big-endian
	buffer.append(0xCB)
	buffer.append_array(raw)


static func _write_length(buffer: PackedByteArray, n: int, fix_base: int, fix_max: int, tags: Array[int]) -> void:
	# tags: the 8-, 16- and 32-bit length forms (0 where a form does not exist)
	if fix_base >= 0 and n <= fix_max:
		buffer.append(fix_base | n)
	elif tags[0] != 0 and n <= 0xFF:
		buffer.append(tags[0])
		_put_uint(buffer, n, 1)
	elif n <= 0xFFFF:
		buffer.append(tags[1])
		_put_uint(buffer, n, 2)
	else:
		buffer.append(tags[2])
		_put_uint(buffer, n, 4)


static func _write(buffer: PackedByteArray, value: Variant, depth: int) -> String:
	if depth > MAX_DEPTH:
		return "nesting deeper than %d" % MAX_DEPTH
	match typeof(value):
		TYPE_NIL:
			buffer.append(0xC0)
		TYPE_BOOL:
			buffer.append(0xC3 if value else 0xC2)
		TYPE_INT:
			_write_int(buffer, value)
		TYPE_FLOAT:
			_write_float(buffer, value)
		TYPE_STRING, TYPE_STRING_NAME:
			var utf8: PackedByteArray = String(value).to_utf8_buffer()
			_write_length(buffer, utf8.size(), 0xA0, 31, [0xD9, 0xDA, 0xDB])
			buffer.append_array(utf8)
		TYPE_PACKED_BYTE_ARRAY:
			var raw: PackedByteArray = value
			_write_length(buffer, raw.size(), -1, -1, [0xC4, 0xC5, 0xC6])
			buffer.append_array(raw)
		TYPE_ARRAY:
			var items: Array = value
			_write_length(buffer, items.size(), 0x90, 15, [0, 0xDC, 0xDD])
			for item: Variant in items:
				var error := _write(buffer, item, depth + 1)
				if not error.is_empty():
					return error
		TYPE_DICTIONARY:
			var map: Dictionary = value
			_write_length(buffer, map.size(), 0x80, 15, [0, 0xDE, 0xDF])
			for key: Variant in map:
				var key_error := _write(buffer, key, depth + 1)
				if not key_error.is_empty():
					return key_error
				var value_error := _write(buffer, map[key], depth + 1)
				if not value_error.is_empty():
					return value_error
		_:
			return "cannot encode a value of type %s" % type_string(typeof(value))
	return ""


# --- decoding ---------------------------------------------------------------------------------


class _Reader:
	extends RefCounted
	var bytes: PackedByteArray
	var pos: int = 0
	var error: String = ""

	func _init(data: PackedByteArray) -> void:
		bytes = data

	func fail(message: String) -> Variant:
		if error.is_empty():
			error = "%s (at byte %d)" % [message, pos]
		return null

	func take(n: int) -> PackedByteArray:
		if pos + n > bytes.size():
			fail("truncated: %d bytes needed, %d left" % [n, bytes.size() - pos])
			return PackedByteArray()
		var chunk := bytes.slice(pos, pos + n)
		pos += n
		return chunk

	func uint(n: int) -> int:
		var chunk := take(n)
		var value := 0
		for b in chunk:
			value = (value << 8) | b
		return value

	func sint(n: int) -> int:
		var value := uint(n)
		var bits := 8 * n
		if bits < 64 and value >= (1 << (bits - 1)):
			value -= 1 << bits
		return value

	func uint64() -> Variant:
		var chunk := take(8)
		if not error.is_empty():
			return null
		if chunk[0] & 0x80:
			return fail("unsigned integer above 2^63-1 does not fit a GDScript int")
		var value := 0
		for b in chunk:
			value = (value << 8) | b
		return value

	func float_of(n: int) -> float:
		var chunk := take(n)
		if not error.is_empty():
			return 0.0
		chunk.reverse()
		return chunk.decode_double(0) if n == 8 else chunk.decode_float(0)

	func text(n: int) -> Variant:
		var raw := take(n)
		if not error.is_empty():
			return null
		var decoded := raw.get_string_from_utf8()
		if decoded.to_utf8_buffer() != raw:
			return fail("string is not valid UTF-8")
		return decoded

	func array(n: int, depth: int) -> Variant:
		var items: Array = []
		for i in n:
			var item: Variant = read(depth + 1)
			if not error.is_empty():
				return null
			items.append(item)
		return items

	func map(n: int, depth: int) -> Variant:
		var out: Dictionary = {}
		for i in n:
			var key: Variant = read(depth + 1)
			if not error.is_empty():
				return null
			if typeof(key) == TYPE_ARRAY or typeof(key) == TYPE_DICTIONARY:
				return fail("map keys must be scalars")
			var value: Variant = read(depth + 1)
			if not error.is_empty():
				return null
			out[key] = value
		return out

	func read(depth: int) -> Variant:
		if depth > MAX_DEPTH:
			return fail("nesting deeper than %d" % MAX_DEPTH)
		if pos >= bytes.size():
			return fail("truncated: a value was expected")
		var tag := bytes[pos]
		pos += 1
		if tag <= 0x7F:
			return tag
		if tag >= 0xE0:
			return tag - 0x100
		if tag >= 0xA0 and tag <= 0xBF:
			return text(tag & 0x1F)
		if tag >= 0x90 and tag <= 0x9F:
			return array(tag & 0x0F, depth)
		if tag >= 0x80 and tag <= 0x8F:
			return map(tag & 0x0F, depth)
		match tag:
			0xC0:
				return null
			0xC2:
				return false
			0xC3:
				return true
			0xC4:
				return take(uint(1))
			0xC5:
				return take(uint(2))
			0xC6:
				return take(uint(4))
			0xCA:
				return float_of(4)
			0xCB:
				return float_of(8)
			0xCC:
				return uint(1)
			0xCD:
				return uint(2)
			0xCE:
				return uint(4)
			0xCF:
				return uint64()
			0xD0:
				return sint(1)
			0xD1:
				return sint(2)
			0xD2:
				return sint(4)
			0xD3:
				return sint(8)
			0xD9:
				return text(uint(1))
			0xDA:
				return text(uint(2))
			0xDB:
				return text(uint(4))
			0xDC:
				return array(uint(2), depth)
			0xDD:
				return array(uint(4), depth)
			0xDE:
				return map(uint(2), depth)
			0xDF:
				return map(uint(4), depth)
		return fail("unsupported MessagePack type 0x%02X (extension types are not part of the protocol)" % tag)
