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
## Every request resolves exactly once: with the reply, with the sidecar's typed error, with
## `sidecar_down` when the sidecar dies or the connection drops while it is out, or with
## `no_reply` when its timeout passes first. Requests made while disconnected wait (until their
## timeout) and go out as soon as the connection is up.
##
## With auto-launch on, the client supervises the sidecar it launched (LoreguardSupervisor): it
## notices an exit within a fraction of a second, fails what was in flight with `sidecar_down`,
## restarts it with backoff (then gives up: `failed`), and uses a sidecar found on the port only
## when it is the one this game launched (or `loreguard/sidecar/reuse_running` is on).
## `status_changed` reports each step for the game's UI.
## Designer data (`load_world`, `register_npc`) is remembered and sent again after every
## reconnect, so a restarted sidecar knows the game's world and NPCs before anything else.

## The connection is up and the designer data has been sent again.
signal connected
## The connection ended; the client keeps reconnecting with backoff.
signal disconnected(reason: String)
## The sidecar cannot be used as it is (no bundle, wrong platform or version, it exited before
## answering): one line for a status label. The same line is in `problem` and the error log.
signal sidecar_problem(message: String)
## The sidecar's state changed: starting, downloading_model and loading_model (with progress),
## ready, restarting, failed.
signal status_changed(status: LoreguardSidecarStatus)

const PROTOCOL_VERSION := 1
## How long `start()` waits for `hello` before it launches the sidecar (when auto-launch is on).
const LAUNCH_PROBE_MS := 1500
## How long the check of a sidecar found on the port (its `hello`) may take.
const VET_TIMEOUT_MS := 5000
## ZMTP heartbeat: a silent sidecar is given up on within about twice this after a PING.
const HEARTBEAT_MS := 1000
## The states a launched sidecar's download and loading lines may move the status between.
const _LAUNCHING: Array[LoreguardSidecarStatus.State] = [
	LoreguardSidecarStatus.State.STARTING,
	LoreguardSidecarStatus.State.DOWNLOADING_MODEL,
	LoreguardSidecarStatus.State.LOADING_MODEL,
]

## Connect on `_ready` from the project settings. Turn off to call `start()` yourself.
@export var autostart: bool = true

## The sidecar's address, e.g. "tcp://127.0.0.1:7878".
var address: String = ""
var request_timeout_ms: int = 60000
var dealer: LoreguardDealer = LoreguardDealer.new()
## Where the sidecar stands; `status_changed` reports every change.
var status: LoreguardSidecarStatus = LoreguardSidecarStatus.new()
## The sidecar process this client launched: its lifeline, exit and log.
var supervisor: LoreguardSupervisor = LoreguardSupervisor.new()
## The process id of the sidecar this client launched, or -1.
var launched_pid: int:
	get:
		return supervisor.pid
## The last `sidecar_problem`, or "".
var problem: String = ""

## Forwards audit records to the editor's Loreguard tab while the game runs under the
## debugger; null otherwise.
var debug_forwarder: LoreguardDebugForwarder

var _next_id: int = 1
var _waiting: Array[_Pending] = []
var _in_flight: Dictionary = {}
var _session: Array[_SessionEntry] = []
## NPC ids the game asked to warm (a set): warmed again once the session is replayed.
var _warmed: Dictionary = {}
## Auto-launch: only a sidecar this game launched (or one explicitly reused) may be used.
var _managed: bool = false
## The connection may carry requests (always, for an explicitly configured sidecar).
var _vetted: bool = false
var _launch_port: int = 0
## Until when `start()` waits for an existing sidecar before launching; -1: not waiting.
var _probe_until_ms: int = -1
## When the next restart is due; -1: none scheduled.
var _restart_at_ms: int = -1
var _restarts: int = 0
## When the sidecar now loading was launched, or finished downloading its model (the status
## counts the seconds from it); -1: none.
var _launched_at_ms: int = -1
## Why the launched sidecar cannot start however often it is restarted (its model is not
## installed and may not be downloaded), as its log said; "" otherwise.
var _launch_problem: String = ""
# The sidecar's line for a --model that is not installed, without --yes (server/models/resolve.py).
var _not_installed_line := RegEx.create_from_string("^loreguard: (.+) is not installed: ")


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
	supervisor.loading.connect(_on_loading)
	supervisor.downloading.connect(_on_downloading)
	supervisor.log_line.connect(_on_sidecar_log)
	if autostart and not Engine.is_editor_hint():
		start()


func _process(_delta: float) -> void:
	var now := Time.get_ticks_msec()
	dealer.poll(now)
	_supervise(now)
	_expire(now)


# Quitting the game and freeing this node both pass through here.
func _exit_tree() -> void:
	stop_sidecar()


## Connects to `to_address` (default: the project setting). With auto-launch on, launches the
## sidecar when none answers within LAUNCH_PROBE_MS, and supervises it.
func start(to_address: String = "", auto_launch: bool = LoreguardSettings.auto_launch()) -> void:
	address = to_address if not to_address.is_empty() else LoreguardSettings.address()
	request_timeout_ms = LoreguardSettings.request_timeout_ms()
	_managed = auto_launch
	_vetted = not auto_launch
	_restarts = 0
	_restart_at_ms = -1
	dealer.heartbeat_ms = HEARTBEAT_MS
	var open_problem := dealer.open(address)
	if not open_problem.is_empty():
		push_error("Loreguard: " + open_problem)
		_set_status(LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.FAILED, open_problem))
		return
	_launch_port = dealer.port
	_set_status(LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.STARTING, "connecting to " + address))
	_probe_until_ms = Time.get_ticks_msec() + LAUNCH_PROBE_MS if auto_launch else -1


func is_connected_to_sidecar() -> bool:
	return dealer.is_ready() and _vetted


## Launches the project's launch command (`loreguard serve …`) with this game's lifeline (see
## LoreguardSupervisor); it is stopped when the game exits, and exits by itself if the game dies.
func launch_sidecar() -> bool:
	if supervisor.pid > 0:
		return true
	_probe_until_ms = -1
	var command := LoreguardSettings.launch_command()
	if LoreguardBundle.in_use():
		var bundle := LoreguardBundle.folder()
		var bundle_problem := LoreguardBundle.problem(bundle)
		if not bundle_problem.is_empty():
			# A restart cannot fix a missing or mismatched bundle: say so once and stop.
			_report_problem(bundle_problem)
			_set_status(LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.FAILED, bundle_problem))
			return false
		command = LoreguardBundle.launch_command(bundle, address)
	_launch_problem = ""
	var launch_problem := supervisor.launch(command, _launch_port)
	if not launch_problem.is_empty():
		push_error("Loreguard: " + launch_problem)
		_on_sidecar_exited(launch_problem)
		return false
	_launched_at_ms = Time.get_ticks_msec()
	var loading := LoreguardSidecarStatus.new(
		LoreguardSidecarStatus.State.LOADING_MODEL, "launched (pid %d, port %d)" % [supervisor.pid, _launch_port]
	)
	_set_status(loading)
	return true


func stop_sidecar() -> void:
	_restart_at_ms = -1
	supervisor.stop()


## Sends one request and waits for its outcome. `timeout_ms` < 0 means the project setting.
## `on_chunk(body)` gets the partial replies (`<type>.chunk`) of a streamed request, in order.
func request(
	type: String, body: Dictionary = {}, timeout_ms: int = -1, on_chunk: Callable = Callable()
) -> LoreguardResult:
	var pending := _make_pending(type, body, timeout_ms)
	pending.on_chunk = on_chunk
	if pending.result == null:
		_submit(pending)
	if pending.result == null:
		await pending.done
	return pending.result


## Every `hello` reply is checked against the addon's version (a mismatch is a `sidecar_problem`).
func hello(timeout_ms: int = -1) -> LoreguardResult:
	var result := await request("hello", {"client": "loreguard-godot"}, timeout_ms)
	if result.ok:
		_check_version(result.body)
	return result


## Loads the world (canonical facts, rules, fallbacks); sent again after every reconnect.
func load_world(world: LoreguardWorld) -> LoreguardResult:
	return await _session_request("world.load", "world", world.to_dict())


## Registers an NPC from its profile and rule sets; sent again after every reconnect.
func register_npc(profile: LoreguardNpcProfile, rules: Array[LoreguardRuleSet] = []) -> LoreguardResult:
	return await _session_request("npc.register", "npc:" + profile.id, profile.to_dict(rules))


## Warms the NPC: the sidecar evaluates its prompt (persona, facts, rules) into the model's cache
## in idle time, so its first line starts sooner. Answered at once; changes no memory. Sent again
## after every reconnect, after the NPC's registration (a restarted sidecar's cache is empty).
func warm(npc_id: String) -> LoreguardResult:
	_warmed[npc_id] = true
	return await request("npc.warm", {"npc_id": npc_id})


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
	if pending.result == null:
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
	if status.state == LoreguardSidecarStatus.State.FAILED:
		var why := "the sidecar is not running: " + status.reason
		pending.resolve(LoreguardResult.failure(LoreguardError.new(LoreguardError.SIDECAR_DOWN, why)))
	elif is_connected_to_sidecar() and dealer.send(pending.bytes):
		_in_flight[pending.id] = pending
	else:
		_waiting.append(pending)


func _on_state_changed(state: LoreguardDealer.State) -> void:
	if state == LoreguardDealer.State.READY:
		_probe_until_ms = -1  # something answers: the check below decides whether to use it
		if _vetted:
			_open_session()
		else:
			_vet()
	elif state == LoreguardDealer.State.DISCONNECTED:
		# The sidecar may or may not have acted on these; waiting longer cannot tell.
		_fail_in_flight("the connection dropped before the reply: " + dealer.last_error)
		if _managed:
			_vetted = false  # whatever answers on the port next is checked again
			if supervisor.pid < 0 and _probe_until_ms >= 0:
				launch_sidecar()  # nothing listens there: no need to wait out the probe
		if status.state == LoreguardSidecarStatus.State.READY:
			var why := "lost the connection to %s: %s" % [address, dealer.last_error]
			_set_status(LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.RESTARTING, why))
		disconnected.emit(dealer.last_error)


func _report_problem(message: String) -> void:
	problem = message
	push_error("Loreguard: " + message)
	sidecar_problem.emit(message)


## A sidecar of another version may speak the same protocol but not mean the same by it.
func _check_version(hello_reply: Dictionary) -> void:
	var mismatch := LoreguardBundle.version_problem(hello_reply)
	if not mismatch.is_empty() and mismatch != problem:
		_report_problem(mismatch)


## The connection is usable: designer data first, then what waited, then `connected`.
func _open_session() -> void:
	_restarts = 0
	_replay_session()
	var waiting := _waiting
	_waiting = []
	for pending in waiting:
		_submit(pending)
	_set_status(LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.READY, "connected to " + address))
	connected.emit()


## Checks with `hello` that the sidecar on the port is this game's own (its launch token), or one
## the project says to reuse; anything else is left alone and this game's sidecar goes elsewhere.
func _vet() -> void:
	var pending := _make_pending("hello", {"client": "loreguard-godot"}, VET_TIMEOUT_MS)
	if pending.result != null or not dealer.send(pending.bytes):
		return
	_in_flight[pending.id] = pending
	await pending.done
	var result := pending.result
	if _vetted or not dealer.is_ready() or result.error != null and result.error.code == LoreguardError.SIDECAR_DOWN:
		return  # the connection dropped meanwhile: the next one is checked again
	if result.ok and (supervisor.owns(result.body) or supervisor.pid < 0 and LoreguardSettings.reuse_running()):
		_vetted = true
		_check_version(result.body)
		_open_session()
		return
	var who := (
		"a sidecar (%s) not started by this game" % result.body.get("server", "?")
		if result.ok
		else "something that does not answer hello (%s)" % result.error
	)
	_move_away_from(who)


## Launches this game's own sidecar on a free port, leaving `who` on the configured one alone.
func _move_away_from(who: String) -> void:
	var port := LoreguardSupervisor.free_port()
	var conflict := "%s answers on %s" % [who, address]
	if port <= 0:
		dealer.close()
		_set_status(LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.FAILED, conflict + "; no free port"))
		return
	push_warning(
		(
			(
				"Loreguard: %s; it may be left over from an earlier run. This game launches its own on port %d."
				+ " To use a sidecar you started yourself, turn off loreguard/sidecar/auto_launch"
				+ " or turn on loreguard/sidecar/reuse_running."
			)
			% [conflict, port]
		)
	)
	supervisor.stop()
	_launch_port = port
	address = "tcp://%s:%d" % [dealer.host, port]
	dealer.close()
	dealer.open(address)
	launch_sidecar()


## Fails every request on the wire with `sidecar_down`; a designer-data request goes back in the
## queue instead, since the session replay sends it again.
func _fail_in_flight(why: String) -> void:
	var lost := _in_flight.values()
	_in_flight.clear()
	for pending: _Pending in lost:
		if _is_session_waiter(pending):
			_waiting.append(pending)
		else:
			pending.resolve(
				LoreguardResult.failure(LoreguardError.new(LoreguardError.SIDECAR_DOWN, why, {"sent": true}))
			)


func _is_session_waiter(pending: _Pending) -> bool:
	for entry in _session:
		if entry.waiter == pending:
			return true
	return false


func _supervise(now_ms: int) -> void:
	if not _managed:
		return
	if supervisor.poll(now_ms):
		_on_sidecar_exited("")
	elif status.state == LoreguardSidecarStatus.State.LOADING_MODEL and _launched_at_ms >= 0:
		# Every second of the wait is reported, also before the sidecar's first progress line
		# (starting Python and importing llama.cpp takes seconds of its own).
		var seconds := (now_ms - _launched_at_ms) / 1000
		if seconds > int(status.loading_s):
			_on_loading(float(seconds), status.loading_what)
	if _restart_at_ms >= 0 and now_ms >= _restart_at_ms:
		_restart_at_ms = -1
		launch_sidecar()
	elif _probe_until_ms >= 0 and now_ms >= _probe_until_ms and not _vetted:
		launch_sidecar()  # nothing answered on the port in time


## The launched sidecar exited (or could not start): fail what was in flight, restart with backoff.
func _on_sidecar_exited(reason: String) -> void:
	var why := reason
	if why.is_empty():
		why = "the sidecar exited"
		if not supervisor.last_log_line.is_empty():
			why += " (its last log line: %s)" % supervisor.last_log_line
	_vetted = false
	if not _launch_problem.is_empty():
		# A restart would meet the same missing model: say what to do, once, and stop.
		_report_problem(_launch_problem)
		_fail_in_flight(_launch_problem)
		_give_up(_launch_problem)
		return
	var starting := [
		LoreguardSidecarStatus.State.STARTING,
		LoreguardSidecarStatus.State.DOWNLOADING_MODEL,
		LoreguardSidecarStatus.State.LOADING_MODEL
	]
	if status.state in starting:
		# It never answered: most often a bad argument or a model it cannot load, which the
		# restarts below will meet again. Say so on the status line at once.
		var last := supervisor.last_log_line
		_report_problem("the sidecar exited before it answered" + (" (%s)" % last if not last.is_empty() else ""))
	_fail_in_flight(why)
	var delays := LoreguardSupervisor.RESTART_DELAYS_MS
	if _restarts >= delays.size():
		_give_up(why)
		return
	_restart_at_ms = Time.get_ticks_msec() + int(delays[_restarts])
	_restarts += 1
	var restarting := LoreguardSidecarStatus.State.RESTARTING
	_set_status(LoreguardSidecarStatus.new(restarting, why, _restarts, delays.size()))


## FAILED: requests fail at once with `sidecar_down`, except designer data (sent on a reconnect).
func _give_up(why: String) -> void:
	_set_status(LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.FAILED, why))
	for pending in _waiting.duplicate():
		if not _is_session_waiter(pending):
			_waiting.erase(pending)
			pending.resolve(LoreguardResult.failure(LoreguardError.new(LoreguardError.SIDECAR_DOWN, why)))


func _on_downloading(file: String, done_mib: float, total_mib: float) -> void:
	if status.state not in _LAUNCHING:
		return
	var downloading := LoreguardSidecarStatus.new(
		LoreguardSidecarStatus.State.DOWNLOADING_MODEL, "downloading " + file
	)
	downloading.loading_what = file
	downloading.download_done_mib = done_mib
	downloading.download_total_mib = total_mib
	_set_status(downloading)


func _on_loading(_sidecar_seconds: float, what: String) -> void:
	if status.state not in _LAUNCHING:
		return
	if status.state == LoreguardSidecarStatus.State.DOWNLOADING_MODEL:
		_launched_at_ms = Time.get_ticks_msec()  # the loading seconds count from the download's end
	var reason := "loading " + what if not what.is_empty() else status.reason
	var loading := LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.LOADING_MODEL, reason)
	# Counted from the launch, so the number never jumps back when the sidecar starts counting.
	loading.loading_s = ((Time.get_ticks_msec() - _launched_at_ms) / 1000.0 if _launched_at_ms >= 0 else 0.0)
	loading.loading_what = what
	var same := status.state == LoreguardSidecarStatus.State.LOADING_MODEL and status.loading_what == what
	if same and int(loading.loading_s) == int(status.loading_s):
		return  # ticks come four times a second; the status changes once a second
	_set_status(loading)


func _on_sidecar_log(line: String) -> void:
	print(LoreguardSupervisor.LOG_PREFIX + line)
	var missing := _not_installed_line.search(line)
	if missing != null:
		var model := missing.get_string(1)
		_launch_problem = (
			(
				"the dialogue model %s is not installed: run `loreguard models pull %s`, or turn on the project"
				+ " setting %s to download it when the game starts"
			)
			% [model, model, LoreguardSettings.ALLOW_MODEL_DOWNLOAD]
		)
	if line.contains("listening on"):
		dealer.retry_now()  # bound: connect now rather than after the reconnect backoff


func _set_status(new_status: LoreguardSidecarStatus) -> void:
	status = new_status
	print_verbose("Loreguard: sidecar %s" % new_status)
	status_changed.emit(new_status)


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
	# After the registrations, which the sidecar handles in arrival order.
	var warm_ids: Array = _warmed.keys()
	warm_ids.sort()
	for npc_id: String in warm_ids:
		var warm_pending := _make_pending("npc.warm", {"npc_id": npc_id}, -1)
		var warm_key := "npc.warm " + npc_id
		warm_pending.done.connect(func() -> void: _warn_replay(warm_key, warm_pending.result), CONNECT_ONE_SHOT)
		_submit(warm_pending)


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
