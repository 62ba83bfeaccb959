@icon("../icon.svg")
class_name LoreguardClient
extends Node
## The `Loreguard` autoload: one connection to the sidecar and awaitable requests over it.
##
##     var result := await Loreguard.interact({"npc_id": "guard",
##             "trigger_reason": "player_utterance", "player_input": "Hello"})
##     if result.ok:
##         print(result.line.dialogue)  # a LoreguardLine; result.body is the raw reply
##     else:
##         print(result.error.code)  # a LoreguardError code, e.g. "not_found"
##
## Every request resolves exactly once: with the reply, with the sidecar's typed error, or with
## `no_reply` when its timeout passes or the connection drops first. Requests made while
## disconnected wait (until their timeout) and go out as soon as the connection is up.
## Designer data (`load_world`, `register_npc`) is remembered and sent again after every
## reconnect, so a restarted sidecar knows the game's world and NPCs before anything else.

## The connection is up and the designer data has been sent again.
signal connected
## The connection ended; the client keeps reconnecting with backoff.
signal disconnected(reason: String)

const PROTOCOL_VERSION := 1
## How long `start()` waits for `hello` before it launches the sidecar (when auto-launch is on).
const LAUNCH_PROBE_MS := 1500

## Connect on `_ready` from the project settings. Turn off to call `start()` yourself.
@export var autostart: bool = true

## The sidecar's address, e.g. "tcp://127.0.0.1:7878".
var address: String = ""
var request_timeout_ms: int = 60000
var dealer: LoreguardDealer = LoreguardDealer.new()
## The process id of the sidecar this client launched, or -1.
var launched_pid: int = -1

## Forwards audit records to the editor's Loreguard tab while the game runs under the
## debugger; null otherwise.
var debug_forwarder: LoreguardDebugForwarder

var _next_id: int = 1
var _waiting: Array[_Pending] = []
var _in_flight: Dictionary = {}
var _session: Array[_SessionEntry] = []


## A request on its way: resolved once, by reply, error, timeout or disconnect.
class _Pending:
	extends RefCounted
	## Emitted once, when `result` is set.
	signal done
	var id: int
	var bytes: PackedByteArray
	var deadline_ms: int
	var timeout_ms: int
	var result: LoreguardResult
	## Streamed requests: called with each `*.chunk` body, in order, before the reply.
	var on_chunk: Callable

	func resolve(with: LoreguardResult) -> void:
		if result == null:
			result = with
			done.emit()


## Designer data sent again after each reconnect.
class _SessionEntry:
	extends RefCounted
	var key: String
	var type: String
	var body: Dictionary
	## The request its caller awaits, while one does.
	var waiter: _Pending


func _ready() -> void:
	debug_forwarder = LoreguardDebugForwarder.attach_if_debugging(self)
	dealer.state_changed.connect(_on_state_changed)
	dealer.message_received.connect(_on_message)
	if autostart and not Engine.is_editor_hint():
		start()


func _process(_delta: float) -> void:
	dealer.poll()
	_expire(Time.get_ticks_msec())


# Quitting the game and freeing this node both pass through here.
func _exit_tree() -> void:
	stop_sidecar()


## Connects to `to_address` (default: the project setting). With auto-launch on, launches the
## sidecar when it does not answer `hello` within LAUNCH_PROBE_MS.
func start(to_address: String = "", auto_launch: bool = LoreguardSettings.auto_launch()) -> void:
	address = to_address if not to_address.is_empty() else LoreguardSettings.address()
	request_timeout_ms = LoreguardSettings.request_timeout_ms()
	var problem := dealer.open(address)
	if not problem.is_empty():
		push_error("Loreguard: " + problem)
		return
	if auto_launch:
		var probe := await hello(LAUNCH_PROBE_MS)
		if not probe.ok and probe.error.code == LoreguardError.NO_REPLY:
			launch_sidecar()


func is_connected_to_sidecar() -> bool:
	return dealer.is_ready()


## Starts the project's launch command (`loreguard serve …`); it is stopped when the game exits.
func launch_sidecar() -> bool:
	var command := LoreguardSettings.launch_command()
	if command.is_empty() or launched_pid > 0:
		return launched_pid > 0
	launched_pid = OS.create_process(command[0], command.slice(1))
	if launched_pid <= 0:
		push_error("Loreguard: could not launch the sidecar with %s" % " ".join(command))
		return false
	print_verbose("Loreguard: launched the sidecar (pid %d): %s" % [launched_pid, " ".join(command)])
	return true


func stop_sidecar() -> void:
	if launched_pid > 0 and OS.is_process_running(launched_pid):
		OS.kill(launched_pid)
	launched_pid = -1


## Sends one request and waits for its outcome. `timeout_ms` < 0 means the project setting.
## `on_chunk(body)` gets the partial replies (`<type>.chunk`) of a streamed request, in order.
func request(
	type: String, body: Dictionary = {}, timeout_ms: int = -1, on_chunk: Callable = Callable()
) -> LoreguardResult:
	var pending := _make_pending(type, body, timeout_ms)
	pending.on_chunk = on_chunk
	if pending.result == null:
		_submit(pending)
		await pending.done
	return pending.result


func hello(timeout_ms: int = -1) -> LoreguardResult:
	return await request("hello", {"client": "loreguard-godot"}, timeout_ms)


## Loads the world (canonical facts, rules, fallbacks); sent again after every reconnect.
func load_world(world: LoreguardWorld) -> LoreguardResult:
	return await _session_request("world.load", "world", world.to_dict())


## Registers an NPC from its profile and rule sets; sent again after every reconnect.
func register_npc(profile: LoreguardNpcProfile, rules: Array[LoreguardRuleSet] = []) -> LoreguardResult:
	return await _session_request("npc.register", "npc:" + profile.id, profile.to_dict(rules))


## One interaction: the body is an InteractionContext (npc_id, trigger_reason, player_input, …).
## A successful result carries the reply as a typed `result.line`. With `on_chunk`, the reply
## streams: `on_chunk(body)` gets each `interact.chunk` body ({"seq", "text", "attempt"}) as the
## sidecar releases it, in order; the chunks' texts add up to `result.line.dialogue`. The
## timeout then counts from the last chunk.
func interact(context: Dictionary, timeout_ms: int = -1, on_chunk: Callable = Callable()) -> LoreguardResult:
	var body := context
	if on_chunk.is_valid():
		body = context.duplicate()
		body["stream"] = true
	var result := await request("interact", body, timeout_ms, on_chunk)
	if result.ok:
		result.line = LoreguardLine.from_reply(result.body)
	if debug_forwarder != null:
		debug_forwarder.pull()
	return result


## Sets world-state keys, globally or (with `npc_id`) for one NPC.
func set_state(values: Dictionary, npc_id: String = "", remove: PackedStringArray = []) -> LoreguardResult:
	var body := {"values": values, "remove": Array(remove)}
	if not npc_id.is_empty():
		body["npc_id"] = npc_id
	return await request("world.set_state", body)


func memory(npc_id: String) -> LoreguardResult:
	return await request("memory.get", {"npc_id": npc_id})


func save_slot(slot: String) -> LoreguardResult:
	return await request("save", {"slot": slot})


func load_slot(slot: String) -> LoreguardResult:
	return await request("load", {"slot": slot})


## Recent audit records; with `after` >= 0 (a log position), the ones after it.
func audit_tail(npc_id: String = "", limit: int = 20, after: int = -1) -> LoreguardResult:
	var body := {"limit": limit}
	if after >= 0:
		body["after"] = after
	if not npc_id.is_empty():
		body["npc_id"] = npc_id
	return await request("audit.tail", body)


func stats() -> LoreguardResult:
	return await request("stats")


func _session_request(type: String, key: String, body: Dictionary) -> LoreguardResult:
	var entry: _SessionEntry = null
	for existing in _session:
		if existing.key == key:
			entry = existing
	if entry == null:
		entry = _SessionEntry.new()
		entry.key = key
		entry.type = type
		_session.append(entry)
		# The world goes first on a reconnect, then NPCs in the order they registered.
		_session.sort_custom(
			func(a: _SessionEntry, b: _SessionEntry) -> bool: return a.type == "world.load" and b.type != "world.load"
		)
	entry.body = body
	var pending := _make_pending(type, body, -1)
	if pending.result != null:
		return pending.result
	entry.waiter = pending
	_submit(pending)
	await pending.done
	return pending.result


func _make_pending(type: String, body: Dictionary, timeout_ms: int) -> _Pending:
	var pending := _Pending.new()
	pending.id = _next_id
	_next_id += 1
	var envelope := {"v": PROTOCOL_VERSION, "id": pending.id, "type": type, "body": body}
	var encoded := LoreguardMsgPack.encode(envelope)
	if not encoded.ok:
		pending.resolve(
			LoreguardResult.failure(
				LoreguardError.new(LoreguardError.CLIENT, "cannot encode %s: %s" % [type, encoded.error])
			)
		)
		return pending
	pending.bytes = encoded.bytes
	pending.timeout_ms = timeout_ms if timeout_ms >= 0 else request_timeout_ms
	pending.deadline_ms = Time.get_ticks_msec() + pending.timeout_ms
	return pending


func _submit(pending: _Pending) -> void:
	if dealer.is_ready() and dealer.send(pending.bytes):
		_in_flight[pending.id] = pending
	else:
		_waiting.append(pending)


func _on_state_changed(state: LoreguardDealer.State) -> void:
	if state == LoreguardDealer.State.READY:
		_replay_session()
		var waiting := _waiting
		_waiting = []
		for pending in waiting:
			_submit(pending)
		connected.emit()
	elif state == LoreguardDealer.State.DISCONNECTED:
		# The sidecar may or may not have acted on these; waiting longer cannot tell.
		var lost := _in_flight.values()
		_in_flight.clear()
		for pending: _Pending in lost:
			var why := "the connection dropped before the reply: " + dealer.last_error
			pending.resolve(LoreguardResult.failure(LoreguardError.new(LoreguardError.NO_REPLY, why, {"sent": true})))
		disconnected.emit(dealer.last_error)


## Sends the designer data again, in order, before anything that waited for the connection.
func _replay_session() -> void:
	for entry in _session:
		var pending := entry.waiter
		if pending != null and pending in _waiting:
			_waiting.erase(pending)  # its caller is still waiting: this send answers it
		else:
			pending = _make_pending(entry.type, entry.body, -1)
			var key := entry.key
			pending.done.connect(func() -> void: _warn_replay(key, pending.result), CONNECT_ONE_SHOT)
		_submit(pending)


func _warn_replay(key: String, result: LoreguardResult) -> void:
	if not result.ok:
		push_warning("Loreguard: re-sending %s after a reconnect failed: %s" % [key, result.error])


func _on_message(parts: Array[PackedByteArray]) -> void:
	if parts.size() != 1:
		push_warning("Loreguard: ignored a reply of %d frames (the protocol uses one)" % parts.size())
		return
	var decoded := LoreguardMsgPack.decode(parts[0])
	if not decoded.ok or not decoded.value is Dictionary:
		push_warning("Loreguard: ignored an undecodable reply: %s" % decoded.error)
		return
	var reply: Dictionary = decoded.value
	var pending: _Pending = _in_flight.get(reply.get("id"))
	if pending == null:
		return  # a reply for a request that already timed out
	var body: Dictionary = reply.get("body", {}) if reply.get("body") is Dictionary else {}
	if str(reply.get("type", "")).ends_with(".chunk"):
		# A streamed request's partial reply: the request stays in flight until its reply.
		pending.deadline_ms = Time.get_ticks_msec() + pending.timeout_ms
		if pending.on_chunk.is_valid():
			pending.on_chunk.call(body)
		return
	_in_flight.erase(pending.id)
	if reply.get("type") == "error":
		var details: Dictionary = body.get("details") if body.get("details") is Dictionary else {}
		pending.resolve(
			LoreguardResult.failure(
				LoreguardError.new(
					str(body.get("code", LoreguardError.INTERNAL)), str(body.get("message", "")), details
				)
			)
		)
	else:
		pending.resolve(LoreguardResult.success(str(reply.get("type", "")), body))


func _expire(now_ms: int) -> void:
	var expired: Array[_Pending] = []
	for pending: _Pending in _in_flight.values():
		if now_ms >= pending.deadline_ms:
			expired.append(pending)
	for pending in _waiting:
		if now_ms >= pending.deadline_ms:
			expired.append(pending)
	for pending in expired:
		_in_flight.erase(pending.id)
		_waiting.erase(pending)
		var why := (
			"no reply within the request timeout"
			if dealer.is_ready()
			else "no connection to the sidecar at %s (%s)" % [address, dealer.last_error]
		)
		pending.resolve(LoreguardResult.failure(LoreguardError.new(LoreguardError.NO_REPLY, why)))
