extends "res://tests/check_run.gd"
## Checks LoreguardZmtp against ZMTP 3.1 byte vectors written by Python (tests/godot_addon/test_zmtp.py).
## Usage: godot --headless --path godot_addon -s res://tests/test_zmtp.gd -- VECTORS.json


func _init() -> void:
	var vectors: Variant = JSON.parse_string(FileAccess.get_file_as_string(OS.get_cmdline_user_args()[0]))
	if typeof(vectors) != TYPE_DICTIONARY:
		push_error("cannot read the vectors")
		quit(2)
		return
	_encoding(vectors)
	_parsing(vectors)
	_errors(vectors)
	_finish()


func _hex(v: Variant) -> PackedByteArray:
	return String(v).hex_decode()


func _same_bytes(name: String, ours: PackedByteArray, theirs: String) -> void:
	_expect(ours.hex_encode() == theirs, name, "ours %s, Python %s" % [ours.hex_encode(), theirs])


func _encoding(v: Dictionary) -> void:
	_same_bytes("greeting", LoreguardZmtp.greeting(), v["greeting"])
	_expect(LoreguardZmtp.check_greeting(_hex(v["server_greeting"])) == "", "accepts a ZMTP 3.1 NULL greeting")
	_same_bytes("READY", LoreguardZmtp.ready_command({"Socket-Type": "DEALER"}), v["ready_dealer"])
	_same_bytes("short frame", LoreguardZmtp.frame(_hex(v["short_body"])), v["short_frame"])
	_same_bytes("long frame", LoreguardZmtp.frame(_hex(v["long_body"])), v["long_frame"])
	var parts: Array[PackedByteArray] = [_hex(v["short_body"]), PackedByteArray(), _hex(v["long_body"])]
	_same_bytes("multipart", LoreguardZmtp.message(parts), v["multipart"])
	_same_bytes("PONG", LoreguardZmtp.pong(_hex(v["ping_context"])), v["pong"])
	_same_bytes("PING", LoreguardZmtp.ping(300, _hex(v["ping_context"])), v["ping"])


func _parsing(v: Dictionary) -> void:
	var stream := _hex(v["stream"])
	for chunk_size: int in [1, 2, 3, 7, 64, 100000]:
		var parser := LoreguardZmtp.Parser.new()
		var frames: Array[LoreguardZmtp.Frame] = []
		for start in range(0, stream.size(), chunk_size):
			parser.feed(stream.slice(start, start + chunk_size))
			var f := parser.next_frame()
			while f != null:
				frames.append(f)
				f = parser.next_frame()
		var expected: Array = v["stream_frames"]
		_expect(
			parser.error.is_empty() and frames.size() == expected.size(),
			"stream in chunks of %d" % chunk_size,
			"%d frames, error %s" % [frames.size(), parser.error]
		)
		for i in min(frames.size(), expected.size()):
			var e: Dictionary = expected[i]
			_expect(
				(
					frames[i].command == e["command"]
					and frames[i].more == e["more"]
					and frames[i].body.hex_encode() == e["body"]
				),
				"frame %d (chunks of %d)" % [i, chunk_size]
			)
	var ready := LoreguardZmtp.parse_command(_hex(v["router_ready_body"]))
	_expect(ready != null and ready.name == "READY", "READY command name")
	var properties: Variant = LoreguardZmtp.parse_properties(ready.data if ready else PackedByteArray())
	_expect(
		typeof(properties) == TYPE_DICTIONARY and properties.get("Socket-Type") == "ROUTER",
		"READY properties",
		str(properties)
	)
	var ping := LoreguardZmtp.parse_command(_hex(v["ping_body"]))
	_expect(
		ping != null and ping.name == "PING" and ping.data.slice(2).hex_encode() == v["ping_context"], "PING context"
	)


func _errors(v: Dictionary) -> void:
	var reserved := LoreguardZmtp.Parser.new()
	reserved.feed(PackedByteArray([0x08, 0x00]))
	_expect(reserved.next_frame() == null and not reserved.error.is_empty(), "reserved flags are an error")
	var big := LoreguardZmtp.Parser.new(1024)
	var body := PackedByteArray()
	body.resize(2000)
	big.feed(LoreguardZmtp.frame(body))
	_expect(big.next_frame() == null and "limit" in big.error, "oversized frame is an error", big.error)
	_expect(LoreguardZmtp.check_greeting(_hex(v["curve_greeting"])) != "", "refuses the CURVE mechanism")
	_expect(LoreguardZmtp.check_greeting(_hex(v["zmtp2_greeting"])) != "", "refuses ZMTP 2")
	_expect(LoreguardZmtp.parse_properties(PackedByteArray([11, 0x53])) == null, "truncated properties are an error")
