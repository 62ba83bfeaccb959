extends SceneTree
## Starts a LoreguardClient the way the autoload does (the LOREGUARD_* environment picks the
## address, launch mode and bundle) and prints how it ended: "launch probe: ready <server>" with
## any version problem, or "launch probe: problem: <status line>". tests/godot_addon/test_bundle_launch.py
## reads that line; a probe that sees neither within WATCHDOG_S exits 2 (a hang, the bug).

const WATCHDOG_S := 240.0

var _client := LoreguardClient.new()
var _ended := false


func _init() -> void:
	create_timer(WATCHDOG_S).timeout.connect(func() -> void: _end("launch probe: timeout", 2))
	_client.autostart = false
	_client.sidecar_problem.connect(func(message: String) -> void: _end("launch probe: problem: " + message, 0))
	_client.connected.connect(_on_connected, CONNECT_ONE_SHOT)
	root.add_child.call_deferred(_client)
	_start.call_deferred()


func _start() -> void:
	_client.start()


func _on_connected() -> void:
	var reply := await _client.hello()
	if _ended:
		return
	# The client's own version check sent its hello first, so its verdict is in by now.
	var server := str(reply.body.get("server", "")) if reply.ok else str(reply.error)
	_end("launch probe: ready %s problem=%s" % [server, _client.problem], 0)


func _end(line: String, code: int) -> void:
	if _ended:
		return
	_ended = true
	print(line)
	_client.stop_sidecar()
	quit(code)
