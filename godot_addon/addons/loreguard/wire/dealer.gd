class_name LoreguardDealer
extends RefCounted
## A ZeroMQ DEALER socket in pure GDScript: ZMTP 3.1 over StreamPeerTCP with the NULL mechanism.
##
## Nothing here blocks or runs by itself: call `poll()` every frame (the `Loreguard` autoload
## does). It connects, shakes hands (greeting, READY with Socket-Type DEALER), answers PING with
## PONG, sends its own PING when the line is quiet, and reconnects with exponential backoff
## whenever the connection fails or goes silent. `send()` only works while `state == READY`;
## queueing across reconnects is the caller's choice, because only the caller knows which
## requests are still wanted.

## Emitted on every state change; `last_error` says why a connection ended.
signal state_changed(state: State)
## One complete message (all its frames) from the peer.
signal message_received(parts: Array[PackedByteArray])

enum State { DISCONNECTED, CONNECTING, HANDSHAKING, READY, CLOSED }

var host: String = "127.0.0.1"
var port: int = 7878
var state: State = State.CLOSED
var last_error: String = ""
## Reconnect delays grow from the first to the last, doubling each failure.
var min_backoff_ms: int = 100
var max_backoff_ms: int = 2000
## How long the TCP connect plus the ZMTP handshake may take.
var handshake_timeout_ms: int = 3000
## Send a PING after this much silence; give up on the peer when twice as long passes after
## that PING with nothing heard. Only time after our PING counts, so a long frame on the game's
## side (a level load) never drops a healthy connection.
var heartbeat_ms: int = 2000
## How long the sidecar keeps this connection while the game sends nothing (the TTL in every
## PING). Long enough to outlast a level load; a game that quits or crashes closes its socket,
## which the sidecar notices at once.
var silence_ttl_ms: int = 30000
var max_frame_size: int = 16 * 1024 * 1024

var _peer: StreamPeerTCP
var _parser: LoreguardZmtp.Parser
var _greeted: bool = false
var _parts: Array[PackedByteArray] = []
var _backoff_ms: int = 0
var _next_attempt_ms: int = 0
var _phase_started_ms: int = 0
var _last_heard_ms: int = 0
## When the unanswered PING went out; -1 while none is outstanding.
var _ping_sent_ms: int = -1


## Parses "tcp://host:port" into {"host", "port"}, or {"error": why it is unusable}.
static func parse_address(address: String) -> Dictionary:
	var rest := address.strip_edges()
	if rest.begins_with("tcp://"):
		rest = rest.substr(6)
	var colon := rest.rfind(":")
	if colon <= 0 or not rest.substr(colon + 1).is_valid_int():
		return {"error": "expected tcp://host:port, got %s" % address}
	var number := rest.substr(colon + 1).to_int()
	if number < 1 or number > 65535:
		return {"error": "port %d is out of range" % number}
	return {"host": rest.substr(0, colon).trim_prefix("[").trim_suffix("]"), "port": number}


## Starts connecting to `address` ("tcp://127.0.0.1:7878"). Returns "" or the address error.
func open(address: String) -> String:
	var parsed := parse_address(address)
	if parsed.has("error"):
		return parsed["error"]
	close()
	host = parsed["host"]
	port = parsed["port"]
	_backoff_ms = 0
	_next_attempt_ms = 0
	_set_state(State.DISCONNECTED)
	return ""


## Drops the connection and stops reconnecting.
func close() -> void:
	_drop()
	_set_state(State.CLOSED)


## While waiting to reconnect: try at the next poll instead of after the backoff (the caller
## knows the peer is up again, e.g. a restarted sidecar logged that it listens).
func retry_now() -> void:
	if state == State.DISCONNECTED:
		_next_attempt_ms = 0


func is_ready() -> bool:
	return state == State.READY


## Sends one single-frame message. False (and nothing sent) unless READY.
func send(body: PackedByteArray) -> bool:
	if state != State.READY:
		return false
	return _write(LoreguardZmtp.frame(body))


## Drives the socket: connect, handshake, read, heartbeat, reconnect. Call once per frame.
func poll(now_ms: int = Time.get_ticks_msec()) -> void:
	match state:
		State.CLOSED:
			return
		State.DISCONNECTED:
			if now_ms >= _next_attempt_ms:
				_start_connect(now_ms)
		State.CONNECTING:
			_poll_connecting(now_ms)
		State.HANDSHAKING, State.READY:
			_poll_connected(now_ms)


func _start_connect(now_ms: int) -> void:
	_peer = StreamPeerTCP.new()
	_parser = LoreguardZmtp.Parser.new(max_frame_size)
	_greeted = false
	_parts.clear()
	_phase_started_ms = now_ms
	var err := _peer.connect_to_host(host, port)
	if err != OK:
		_fail(now_ms, "cannot connect to %s:%d (%s)" % [host, port, error_string(err)])
		return
	_set_state(State.CONNECTING)


func _poll_connecting(now_ms: int) -> void:
	_peer.poll()
	match _peer.get_status():
		StreamPeerTCP.STATUS_CONNECTED:
			_peer.set_no_delay(true)
			_set_state(State.HANDSHAKING)
			_last_heard_ms = now_ms
			if _write(LoreguardZmtp.greeting()):
				_poll_connected(now_ms)
		StreamPeerTCP.STATUS_CONNECTING:
			if now_ms - _phase_started_ms > handshake_timeout_ms:
				_fail(now_ms, "connecting to %s:%d timed out" % [host, port])
		_:
			_fail(now_ms, "connection to %s:%d refused" % [host, port])


func _poll_connected(now_ms: int) -> void:
	_peer.poll()
	if _peer.get_status() != StreamPeerTCP.STATUS_CONNECTED:
		_fail(now_ms, "the sidecar closed the connection")
		return
	var available := _peer.get_available_bytes()
	if available > 0:
		var got: Array = _peer.get_partial_data(available)
		if got[0] != OK:
			_fail(now_ms, "read failed (%s)" % error_string(got[0]))
			return
		_parser.feed(got[1])
		_last_heard_ms = now_ms
		_ping_sent_ms = -1  # any traffic answers a PING
	if state == State.HANDSHAKING:
		_handshake(now_ms)
	if state == State.READY:
		_read_frames(now_ms)
		_heartbeat(now_ms)


func _handshake(now_ms: int) -> void:
	if not _greeted:
		var greeting := _parser.take_raw(LoreguardZmtp.GREETING_SIZE)
		if greeting.is_empty():
			_check_handshake_time(now_ms)
			return
		var problem := LoreguardZmtp.check_greeting(greeting)
		if not problem.is_empty():
			_fail(now_ms, problem)
			return
		_greeted = true
		if not _write(LoreguardZmtp.ready_command({"Socket-Type": "DEALER"})):
			return
	var frame := _parser.next_frame()
	if frame == null:
		if not _parser.error.is_empty():
			_fail(now_ms, "bad frame during handshake: " + _parser.error)
		else:
			_check_handshake_time(now_ms)
		return
	var cmd := LoreguardZmtp.parse_command(frame.body) if frame.command else null
	if cmd == null or cmd.name != "READY":
		_fail(now_ms, "expected the peer's READY command")
		return
	var properties: Variant = LoreguardZmtp.parse_properties(cmd.data)
	var socket_type: String = properties.get("Socket-Type", "") if properties is Dictionary else ""
	if socket_type not in ["ROUTER", "DEALER"]:
		_fail(now_ms, "a DEALER cannot talk to a %s socket" % (socket_type if socket_type else "malformed"))
		return
	_backoff_ms = 0
	_ping_sent_ms = -1
	_set_state(State.READY)


func _check_handshake_time(now_ms: int) -> void:
	if now_ms - _phase_started_ms > handshake_timeout_ms:
		_fail(now_ms, "no ZMTP handshake from %s:%d" % [host, port])


func _read_frames(now_ms: int) -> void:
	while state == State.READY:
		var frame := _parser.next_frame()
		if frame == null:
			if not _parser.error.is_empty():
				_fail(now_ms, "bad frame: " + _parser.error)
			return
		if frame.command:
			_on_command(now_ms, frame)
			continue
		_parts.append(frame.body)
		if not frame.more:
			var parts := _parts
			_parts = []
			message_received.emit(parts)


func _on_command(now_ms: int, frame: LoreguardZmtp.Frame) -> void:
	var cmd := LoreguardZmtp.parse_command(frame.body)
	if cmd == null:
		_fail(now_ms, "malformed command frame")
	elif cmd.name == "PING":
		# PING carries a 2-byte TTL, then the context the PONG must echo.
		_write(LoreguardZmtp.pong(cmd.data.slice(2)))
	elif cmd.name == "ERROR":
		_fail(now_ms, "the peer reported an error: " + cmd.data.slice(1).get_string_from_utf8())


func _heartbeat(now_ms: int) -> void:
	if _ping_sent_ms >= 0:
		if now_ms - _ping_sent_ms > 2 * heartbeat_ms:
			_fail(
				now_ms, "the sidecar stopped answering (nothing heard %d ms after a PING)" % (now_ms - _ping_sent_ms)
			)
	elif now_ms - _last_heard_ms > heartbeat_ms:
		_ping_sent_ms = now_ms
		_write(LoreguardZmtp.ping(mini(silence_ttl_ms / 100, 0xFFFF), PackedByteArray()))


func _write(data: PackedByteArray) -> bool:
	var err := _peer.put_data(data)
	if err != OK:
		_fail(Time.get_ticks_msec(), "write failed (%s)" % error_string(err))
		return false
	return true


func _fail(now_ms: int, why: String) -> void:
	last_error = why
	_drop()
	_backoff_ms = min_backoff_ms if _backoff_ms == 0 else mini(_backoff_ms * 2, max_backoff_ms)
	_next_attempt_ms = now_ms + _backoff_ms
	_set_state(State.DISCONNECTED)


func _drop() -> void:
	if _peer != null:
		_peer.disconnect_from_host()
	_peer = null
	_parts.clear()


func _set_state(new_state: State) -> void:
	if new_state == state:
		return
	state = new_state
	state_changed.emit(new_state)
