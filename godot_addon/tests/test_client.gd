extends "res://tests/check_run.gd"
## LoreguardClient (the autoload's class) against scripted libzmq ROUTERs that pytest runs
## (tests/godot_addon/test_dealer.py): replies matched by id when they come back out of order, the
## request timeout, no sidecar at all, and errors raised before sending.

const WATCHDOG_MS := 60000


func _init() -> void:
	_run.call_deferred()


func _run() -> void:
	create_timer(WATCHDOG_MS / 1000.0).timeout.connect(
		func() -> void:
			printerr("watchdog: the client test ran past %d ms" % WATCHDOG_MS)
			quit(2)
	)
	await _test_out_of_order_replies()
	await _test_timeout_without_reply()
	await _test_no_sidecar()
	_finish()


func _client(address: String) -> LoreguardClient:
	var client := LoreguardClient.new()
	client.autostart = false
	root.add_child(client)
	client.start(address, false)
	return client


func _test_out_of_order_replies() -> void:
	# This router holds three requests, then answers them last first, echoing each body.
	var client := _client(OS.get_environment("LOREGUARD_TEST_REVERSE"))
	var results := {}
	for i in 3:
		_ask(client, i, results)
	var deadline := Time.get_ticks_msec() + 30000
	while results.size() < 3 and Time.get_ticks_msec() < deadline:
		await process_frame
	for i in 3:
		var result: LoreguardResult = results.get(i)
		_expect(
			result != null and result.ok and result.body.get("i") == i,
			"request %d got its own reply: %s" % [i, result]
		)
		_expect(result != null and result.type == "echo.ok", "reply type is the request type + .ok")
	client.queue_free()


func _ask(client: LoreguardClient, i: int, results: Dictionary) -> void:
	results[i] = await client.request("echo", {"i": i}, 10000)


func _test_timeout_without_reply() -> void:
	var client := _client(OS.get_environment("LOREGUARD_TEST_SILENT"))
	await client.connected
	var started := Time.get_ticks_msec()
	var result := await client.request("hello", {}, 300)
	var waited := Time.get_ticks_msec() - started
	_expect(
		not result.ok and result.error.code == LoreguardError.NO_REPLY,
		"an unanswered request ends in no_reply: %s" % result
	)
	_expect(waited >= 300 and waited < 30000, "after its own timeout (%d ms)" % waited)
	_expect(result.error.is_retryable(), "no_reply is retryable")
	var bad := await client.request("hello", {"callable": Callable()})
	_expect(not bad.ok and bad.error.code == LoreguardError.CLIENT, "an unencodable body fails at once: %s" % bad)
	client.queue_free()


func _test_no_sidecar() -> void:
	var listener := TCPServer.new()
	listener.listen(0, "127.0.0.1")
	var port := listener.get_local_port()
	listener.stop()
	var client := _client("tcp://127.0.0.1:%d" % port)
	var result := await client.request("hello", {}, 500)
	_expect(not result.ok and result.error.code == LoreguardError.NO_REPLY, "no sidecar: no_reply: %s" % result)
	_expect(result.error.message.begins_with("no connection to the sidecar"), "and says so: %s" % result.error.message)
	client.queue_free()
