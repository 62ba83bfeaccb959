extends "res://tests/check_run.gd"
## LoreguardDealer against a real libzmq ROUTER (tests/godot_addon/test_dealer.py runs an echo ROUTER
## at $LOREGUARD_TEST_ROUTER that also sends heartbeats) and against a Godot TCPServer that
## speaks no ZMTP. Prints "N passed, M failed"; exits non-zero on failure.

const WATCHDOG_MS := 60000

var _start_ms: int = Time.get_ticks_msec()


func _init() -> void:
	_run.call_deferred()


func _run() -> void:
	_test_parse_address()
	await _test_echo_and_heartbeat()
	await _test_answers_router_pings()
	await _test_backoff_when_refused()
	await _test_not_zmtp()
	_finish()


func _test_parse_address() -> void:
	_expect(
		LoreguardDealer.parse_address("tcp://127.0.0.1:7878") == {"host": "127.0.0.1", "port": 7878}, "tcp://host:port"
	)
	_expect(
		LoreguardDealer.parse_address("localhost:9") == {"host": "localhost", "port": 9}, "host:port without scheme"
	)
	_expect(LoreguardDealer.parse_address("tcp://[::1]:7878") == {"host": "::1", "port": 7878}, "IPv6 in brackets")
	_expect(LoreguardDealer.parse_address("tcp://127.0.0.1").has("error"), "no port is an error")
	_expect(LoreguardDealer.parse_address("tcp://127.0.0.1:99999").has("error"), "port out of range is an error")
	var dealer := LoreguardDealer.new()
	_expect(
		not dealer.open("nonsense").is_empty() and dealer.state == LoreguardDealer.State.CLOSED,
		"a bad address leaves the socket closed"
	)
	_expect(not dealer.send("x".to_utf8_buffer()), "send before connecting is refused")


func _test_echo_and_heartbeat() -> void:
	var dealer := LoreguardDealer.new()
	var states: Array[int] = []
	var messages: Array = []
	dealer.state_changed.connect(func(state: LoreguardDealer.State) -> void: states.append(state))
	dealer.message_received.connect(func(parts: Array[PackedByteArray]) -> void: messages.append(parts))
	_expect(dealer.open(OS.get_environment("LOREGUARD_TEST_ROUTER")).is_empty(), "open the router's address")
	await _pump(dealer, func() -> bool: return dealer.is_ready(), 20000)
	_expect(dealer.is_ready(), "handshake with a libzmq ROUTER: %s" % dealer.last_error)
	_expect(
		(
			states
			== [
				LoreguardDealer.State.DISCONNECTED,
				LoreguardDealer.State.CONNECTING,
				LoreguardDealer.State.HANDSHAKING,
				LoreguardDealer.State.READY
			]
		),
		"states in order: %s" % [states]
	)

	for size in [0, 1, 255, 256, 70000]:
		var body := PackedByteArray()
		body.resize(size)
		for i in size:
			body[i] = (i * 7 + size) & 0xFF
		messages.clear()
		_expect(dealer.send(body), "send %d bytes" % size)
		await _pump(dealer, func() -> bool: return not messages.is_empty(), 20000)
		_expect(
			messages.size() == 1 and messages[0].size() == 1 and messages[0][0] == body,
			"%d-byte message echoed intact" % size
		)

	messages.clear()
	dealer.send("multi".to_utf8_buffer())
	await _pump(dealer, func() -> bool: return not messages.is_empty(), 20000)
	_expect(
		messages.size() == 1 and messages[0].size() == 3 and messages[0][2].get_string_from_utf8() == "three",
		"a multipart message arrives as one message of 3 parts"
	)

	# This router sends no heartbeats: our PINGs after 200 ms of silence must get PONGs, or the
	# dealer gives up 400 ms after an unanswered PING.
	dealer.heartbeat_ms = 200
	states.clear()
	await _pump(dealer, func() -> bool: return false, 2000)
	_expect(
		states.is_empty() and dealer.is_ready(),
		"2 s of silence: our PINGs are answered, still connected (%s)" % dealer.last_error
	)
	# A frame that takes 1.5 s (a level load) is the game's stall, not the peer's silence: the
	# dealer PINGs when it wakes and waits for the answer instead of giving up at once.
	OS.delay_msec(1500)
	await _pump(dealer, func() -> bool: return false, 1000)
	_expect(
		states.is_empty() and dealer.is_ready(),
		"a 1.5 s hitch on the game's side keeps the connection (%s)" % dealer.last_error
	)
	messages.clear()
	dealer.send("after".to_utf8_buffer())
	await _pump(dealer, func() -> bool: return not messages.is_empty(), 20000)
	_expect(messages.size() == 1, "and still echoing")
	dealer.close()
	_expect(
		dealer.state == LoreguardDealer.State.CLOSED and not dealer.send("x".to_utf8_buffer()), "closed: sends refused"
	)


func _test_answers_router_pings() -> void:
	# This router PINGs every 100 ms and drops a peer that sends nothing back within 1 s.
	var dealer := LoreguardDealer.new()
	dealer.heartbeat_ms = 60000  # so that only our PONGs can keep the connection alive
	dealer.open(OS.get_environment("LOREGUARD_TEST_ROUTER_HEARTBEAT"))
	await _pump(dealer, func() -> bool: return dealer.is_ready(), 20000)
	var drops := [0]
	dealer.state_changed.connect(func(_state: LoreguardDealer.State) -> void: drops[0] += 1)
	await _pump(dealer, func() -> bool: return false, 3000)
	_expect(
		dealer.is_ready() and drops[0] == 0,
		"answers the router's PINGs with PONG: still connected after 3 s (%s)" % dealer.last_error
	)
	dealer.close()


func _test_backoff_when_refused() -> void:
	var listener := TCPServer.new()
	listener.listen(0, "127.0.0.1")
	var port := listener.get_local_port()
	listener.stop()  # nothing listens there now
	var dealer := LoreguardDealer.new()
	var attempts: Array[int] = []
	dealer.state_changed.connect(
		func(state: LoreguardDealer.State) -> void:
			if state == LoreguardDealer.State.CONNECTING:
				attempts.append(Time.get_ticks_msec())
	)
	dealer.open("tcp://127.0.0.1:%d" % port)
	var fifth_failed := func() -> bool:
		return attempts.size() >= 5 and dealer.state == LoreguardDealer.State.DISCONNECTED
	await _pump(dealer, fifth_failed, 20000)
	# Delays 100, 200, 400, 800 ms, not one attempt per frame. A busy machine can only make the
	# gaps longer, so each is checked against its lower bound.
	var gaps: Array[int] = []
	for i in range(1, attempts.size()):
		gaps.append(attempts[i] - attempts[i - 1])
	var backoff_ok := attempts.size() >= 5
	for i in gaps.size():
		backoff_ok = backoff_ok and gaps[i] >= 100 * (1 << i)
	_expect(backoff_ok, "reconnects with exponential backoff: gaps %s ms" % str(gaps))
	_expect(
		dealer.state == LoreguardDealer.State.DISCONNECTED and not dealer.last_error.is_empty(),
		"says why: %s" % dealer.last_error
	)
	dealer.close()


func _test_not_zmtp() -> void:
	var listener := TCPServer.new()
	listener.listen(0, "127.0.0.1")
	var dealer := LoreguardDealer.new()
	dealer.open("tcp://127.0.0.1:%d" % listener.get_local_port())
	var peer: StreamPeerTCP = null
	var deadline := Time.get_ticks_msec() + 20000
	while peer == null and Time.get_ticks_msec() < deadline:
		dealer.poll()
		if listener.is_connection_available():
			peer = listener.take_connection()
		await process_frame
	if peer == null:
		_expect(false, "the dealer connects to a plain TCP server")
		return
	peer.put_data("HTTP/1.1 400 Bad Request\r\n\r\n".to_utf8_buffer() + PackedByteArray(range(64)))
	await _pump(dealer, func() -> bool: return dealer.state == LoreguardDealer.State.DISCONNECTED, 20000)
	_expect(dealer.last_error == "not a ZMTP greeting", "a server that is not ZMTP is refused: %s" % dealer.last_error)
	dealer.close()
	listener.stop()


func _pump(dealer: LoreguardDealer, done: Callable, timeout_ms: int) -> void:
	var deadline := Time.get_ticks_msec() + timeout_ms
	while not done.call() and Time.get_ticks_msec() < deadline:
		if Time.get_ticks_msec() - _start_ms > WATCHDOG_MS:
			printerr("watchdog: the dealer test ran past %d ms" % WATCHDOG_MS)
			quit(2)
			return
		dealer.poll()
		await process_frame
