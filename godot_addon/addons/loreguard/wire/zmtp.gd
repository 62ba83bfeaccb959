class_name LoreguardZmtp
extends RefCounted
## ZMTP 3.1 framing (RFC 23 and 37) for a DEALER peer with the NULL mechanism: the greeting, the
## READY, PING and PONG commands, and message frames. Pure byte work, no sockets: the parser is
## fed whatever arrived and hands back complete frames, so it is tested against Python vectors.

const GREETING_SIZE := 64
const FLAG_MORE := 0x01
const FLAG_LONG := 0x02
const FLAG_COMMAND := 0x04


## One frame off the wire.
class Frame:
	extends RefCounted
	var command: bool = false
	var more: bool = false
	var body: PackedByteArray = PackedByteArray()


## A command frame's name and data (e.g. "READY" and its properties).
class Command:
	extends RefCounted
	var name: String = ""
	var data: PackedByteArray = PackedByteArray()


static func greeting(as_server: bool = false) -> PackedByteArray:
	var out := PackedByteArray([0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3, 1])
	var mechanism := "NULL".to_ascii_buffer()
	mechanism.resize(20)  # zero padded
	out.append_array(mechanism)
	out.append(1 if as_server else 0)
	var filler := PackedByteArray()
	filler.resize(31)
	out.append_array(filler)
	return out


## Checks a peer's 64-byte greeting; returns "" when it is ZMTP 3.x with the NULL mechanism.
static func check_greeting(data: PackedByteArray) -> String:
	if data.size() < GREETING_SIZE:
		return "greeting is %d bytes, expected 64" % data.size()
	if data[0] != 0xFF or data[9] != 0x7F:
		return "not a ZMTP greeting"
	if data[10] < 3:
		return "peer speaks ZMTP %d.%d; 3.0 or later is needed" % [data[10], data[11]]
	var mechanism := data.slice(12, 32).get_string_from_ascii()
	if mechanism != "NULL":
		return "peer wants the %s mechanism; only NULL is supported" % mechanism
	return ""


static func frame(body: PackedByteArray, more: bool = false, command: bool = false) -> PackedByteArray:
	var flags := (FLAG_MORE if more else 0) | (FLAG_COMMAND if command else 0)
	var out := PackedByteArray()
	if body.size() <= 255:
		out.append(flags)
		out.append(body.size())
	else:
		out.append(flags | FLAG_LONG)
		for i in range(7, -1, -1):
			out.append((body.size() >> (8 * i)) & 0xFF)
	out.append_array(body)
	return out


## A message of one or more frames (the protocol uses one).
static func message(parts: Array[PackedByteArray]) -> PackedByteArray:
	var out := PackedByteArray()
	for i in parts.size():
		out.append_array(frame(parts[i], i < parts.size() - 1))
	return out


static func command(name: String, data: PackedByteArray = PackedByteArray()) -> PackedByteArray:
	var body := PackedByteArray([name.length()])
	body.append_array(name.to_ascii_buffer())
	body.append_array(data)
	return frame(body, false, true)


## READY with the given properties, e.g. {"Socket-Type": "DEALER"}, in the order given.
static func ready_command(properties: Dictionary) -> PackedByteArray:
	var data := PackedByteArray()
	for key: String in properties:
		var value: PackedByteArray = String(properties[key]).to_utf8_buffer()
		data.append(key.length())
		data.append_array(key.to_ascii_buffer())
		for i in range(3, -1, -1):
			data.append((value.size() >> (8 * i)) & 0xFF)
		data.append_array(value)
	return command("READY", data)


static func pong(context: PackedByteArray) -> PackedByteArray:
	return command("PONG", context)


static func ping(ttl_deciseconds: int, context: PackedByteArray) -> PackedByteArray:
	var data := PackedByteArray([(ttl_deciseconds >> 8) & 0xFF, ttl_deciseconds & 0xFF])
	data.append_array(context)
	return command("PING", data)


## Splits a command frame's body into name and data; null if it is malformed.
static func parse_command(body: PackedByteArray) -> Command:
	if body.is_empty() or body[0] + 1 > body.size():
		return null
	var out := Command.new()
	out.name = body.slice(1, 1 + body[0]).get_string_from_ascii()
	out.data = body.slice(1 + body[0])
	return out


## READY properties as a Dictionary of name -> value (String); null if malformed.
static func parse_properties(data: PackedByteArray) -> Variant:
	var out: Dictionary = {}
	var pos := 0
	while pos < data.size():
		var name_size := data[pos]
		if pos + 1 + name_size + 4 > data.size():
			return null
		var name := data.slice(pos + 1, pos + 1 + name_size).get_string_from_ascii()
		pos += 1 + name_size
		var value_size := (data[pos] << 24) | (data[pos + 1] << 16) | (data[pos + 2] << 8) | data[pos + 3]
		pos += 4
		if pos + value_size > data.size():
			return null
		out[name] = data.slice(pos, pos + value_size).get_string_from_utf8()
		pos += value_size
	return out


## Incremental frame parser: `feed` bytes as they arrive, then take frames with `next_frame`.
class Parser:
	extends RefCounted
	var max_frame_size: int
	var error: String = ""
	var _buffer := PackedByteArray()

	func _init(max_size: int = 16 * 1024 * 1024) -> void:
		max_frame_size = max_size

	func feed(data: PackedByteArray) -> void:
		_buffer.append_array(data)

	func pending() -> int:
		return _buffer.size()

	## Takes exactly `n` raw bytes (the greeting); empty if fewer have arrived.
	func take_raw(n: int) -> PackedByteArray:
		if _buffer.size() < n:
			return PackedByteArray()
		var out := _buffer.slice(0, n)
		_buffer = _buffer.slice(n)
		return out

	## The next complete frame, or null (incomplete input, or an error: see `error`).
	func next_frame() -> Frame:
		if not error.is_empty() or _buffer.size() < 2:
			return null
		var flags := _buffer[0]
		if flags & ~(FLAG_MORE | FLAG_LONG | FLAG_COMMAND):
			error = "reserved frame flags set (0x%02X)" % flags
			return null
		var header := 9 if flags & FLAG_LONG else 2
		if _buffer.size() < header:
			return null
		var size := 0
		if flags & FLAG_LONG:
			if _buffer[1] & 0x80:
				error = "frame size does not fit"
				return null
			for i in range(1, 9):
				size = (size << 8) | _buffer[i]
		else:
			size = _buffer[1]
		if size > max_frame_size:
			error = "frame of %d bytes exceeds the limit of %d" % [size, max_frame_size]
			return null
		if _buffer.size() < header + size:
			return null
		var out := Frame.new()
		out.command = (flags & FLAG_COMMAND) != 0
		out.more = (flags & FLAG_MORE) != 0
		out.body = _buffer.slice(header, header + size)
		_buffer = _buffer.slice(header + size)
		return out
