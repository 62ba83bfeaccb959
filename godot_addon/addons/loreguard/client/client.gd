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
## With auto-launch on, LoreguardLauncher launches the sidecar and restarts it with backoff when it
## exits after it had answered (then gives up: `failed`); what was in flight then fails with
## `sidecar_down`. A launch that never started is `failed` at once, with one line saying why. A sidecar
## found on the port is used only when this game launched it (or `loreguard/sidecar/reuse_running`
## is on). `status_changed` reports each step for the game's UI.
## Designer data (`load_world`, `register_npc`) is remembered and sent again after every
## reconnect, so a restarted sidecar knows the game's world and NPCs before anything else.
##
## This node decides when a request may go out and what each connection event means.
## LoreguardRequests keeps the requests from id to outcome, LoreguardSession the designer data,
## LoreguardLauncher the sidecar process and the status. The typed calls (`interact`,
## `scene_next`, …) build a body and pass it to `request`.

## The connection is up and the designer data has been sent again.
signal connected
## The connection ended; the client keeps reconnecting with backoff.
signal disconnected(reason: String)
## The sidecar cannot be used as it is (no bundle, wrong platform or version, a launch command that
## cannot start or exited before answering): one line for a status label, naming the fix. The
## same line is in `problem` and, once, in the error log.
signal sidecar_problem(message: String)
## The sidecar's state changed: starting, downloading_model and loading_model (with progress),
## ready, restarting, failed.
signal status_changed(status: LoreguardSidecarStatus)
## The sidecar could not save what was said (`reason` in words: "the disk is full"): that line
## was refused whole and is not remembered. Emitted once when saving starts failing, not per line.
signal storage_failed(reason: String)
## A write succeeded again after `storage_failed`: what is said is remembered again.
signal storage_recovered

const PROTOCOL_VERSION := LoreguardRequests.PROTOCOL_VERSION
## How long `start()` waits for `hello` before it launches the sidecar (LoreguardLauncher's).
const LAUNCH_PROBE_MS := LoreguardLauncher.LAUNCH_PROBE_MS
## How long the check of a sidecar found on the port (its `hello`) may take (LoreguardLauncher's).
const VET_TIMEOUT_MS := LoreguardLauncher.VET_TIMEOUT_MS
## ZMTP heartbeat: a silent sidecar is given up on within about twice this after a PING.
const HEARTBEAT_MS := 1000
# Requests whose success means the sidecar wrote memory (a storage fault has passed).
const _WRITES := ["interact", "scene.next", "scene.say", "world.set_state", "save", "load", "npc.register"]

## Connect on `_ready` from the project settings. Turn off to call `start()` yourself.
@export var autostart: bool = true

## The sidecar's address, e.g. "tcp://127.0.0.1:7878" (LoreguardLauncher moves it to a free port
## when a sidecar this game did not launch holds the configured one).
var address: String:
	get:
		return _launcher.address
	set(value):
		_launcher.address = value
var request_timeout_ms: int = 60000
var dealer: LoreguardDealer = LoreguardDealer.new()
## Where the sidecar stands; `status_changed` reports every change.
var status: LoreguardSidecarStatus:
	get:
		return _launcher.status
## The sidecar process this client launched: its lifeline, exit and log.
var supervisor: LoreguardSupervisor = LoreguardSupervisor.new()
## The process id of the sidecar this client launched, or -1.
var launched_pid: int:
	get:
		return supervisor.pid
## The last `sidecar_problem`, or "".
var problem: String = ""
## The sidecar's saves are failing (between `storage_failed` and `storage_recovered`).
var storage_failing: bool = false

## Forwards audit records to the editor's Loreguard tab while the game runs under the
## debugger; null otherwise.
var debug_forwarder: LoreguardDebugForwarder

## The requests waiting for the connection or on the wire, over this client's dealer.
var _requests: LoreguardRequests = LoreguardRequests.new(dealer)
## The designer data every new connection gets first.
var _session: LoreguardSession = LoreguardSession.new()
## Launching, restarting and the status; it shares this client's dealer and supervisor.
var _launcher: LoreguardLauncher = LoreguardLauncher.new(dealer, supervisor)


# Here rather than in _ready: the launcher may report before the node enters the tree.
func _init() -> void:
	_launcher.status_changed.connect(status_changed.emit)
	_launcher.problem_found.connect(_report_problem)
	_launcher.exited.connect(_fail_in_flight)
	_launcher.gave_up.connect(_refuse_waiting)


func _ready() -> void:
	debug_forwarder = LoreguardDebugForwarder.attach_if_debugging(self)
	dealer.state_changed.connect(_on_state_changed)
	dealer.message_received.connect(_requests.on_message)
	if autostart and not Engine.is_editor_hint():
		start()


func _process(_delta: float) -> void:
	var now := Time.get_ticks_msec()
	dealer.poll(now)
	_launcher.poll(now)
	_requests.expire(now, address)


# Quitting the game and freeing this node both pass through here. Every request still waiting
# (designer data kept for a reconnect included) ends with `sidecar_down`: a coroutine awaiting one
# would otherwise outlive the game, holding what it loaded ("resources still in use at exit").
func _exit_tree() -> void:
	stop_sidecar()
	var never := func(_pending: LoreguardPendingRequest) -> bool: return false
	_requests.fail_in_flight("the game is quitting", never)
	_requests.refuse_waiting("the game is quitting", never)


## Connects to `to_address` (default: the project setting). With auto-launch on, launches the
## sidecar when none answers within LAUNCH_PROBE_MS, and supervises it.
func start(to_address: String = "", auto_launch: bool = LoreguardSettings.auto_launch()) -> void:
	request_timeout_ms = LoreguardSettings.request_timeout_ms()
	dealer.heartbeat_ms = HEARTBEAT_MS
	_launcher.start(to_address if not to_address.is_empty() else LoreguardSettings.address(), auto_launch)


func is_connected_to_sidecar() -> bool:
	return dealer.is_ready() and _launcher.vetted


## Launches the project's launch command (`loreguard serve …`) with this game's lifeline (see
## LoreguardSupervisor); it is stopped when the game exits, and exits by itself if the game dies.
func launch_sidecar() -> bool:
	return _launcher.launch()


func stop_sidecar() -> void:
	_launcher.stop()


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
	_note_storage(type, pending.result)
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
	_session.warm(npc_id)
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
		var receipt: Dictionary = result.body.get("receipt") if result.body.get("receipt") is Dictionary else {}
		var failure: Variant = receipt.get("backend_failure")
		_launcher.model_answered(str(failure) if failure != null else "", str(receipt.get("fallback_reason", "")))
	if debug_forwarder != null:
		debug_forwarder.pull()
	return result


## Stops the NPC's line on its way (the player walked away, skipped it, closed the dialogue):
## the sidecar stops generating it and remembers none of it; its request ends with a `cancelled`
## error (LoreguardNPC emits `line_cancelled`). False when no line of the NPC is on its way.
func cancel_line(npc_id: String) -> bool:
	var pending := _requests.line_of(npc_id)
	if pending == null:
		return false
	if _requests.withdraw(pending):  # never sent: there is nothing to stop over there
		var why := LoreguardError.new(LoreguardError.CANCELLED, "cancelled before it was sent")
		pending.resolve(LoreguardResult.failure(why))
		return true
	request("interact.cancel", {"request_id": pending.id})  # the line's own reply says `cancelled`
	return true


## A new playthrough: its lines are seeded from `seed` (a random one when < 0) and each NPC's
## interaction count, so the same player lines sound new; a save slot keeps the seed.
func new_game(seed: int = -1) -> LoreguardResult:
	return await set_state({"loreguard.seed": seed if seed >= 0 else randi()})


## Whether the NPC's warm-up is done (`body.ready`): until then its first line also waits for
## its prompt to be evaluated, and takes longer. With `wait`, the reply comes once it is done.
func npc_status(npc_id: String, wait: bool = false) -> LoreguardResult:
	return await request("npc.status", {"npc_id": npc_id, "wait": wait})


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


## Opens a scene: `npcs` (ids) speak in turn. `options` holds the rest of `scene.start`:
## "listeners", "player_present", "player_may_join", "topic", "location", "max_lines", "weights".
## `LoreguardScene` is the node that does this for you.
func scene_start(scene_id: String, npcs: PackedStringArray, options: Dictionary = {}) -> LoreguardResult:
	var body := {"scene_id": scene_id, "npcs": Array(npcs)}
	body.merge(options, true)
	return await request("scene.start", body)


## The scene's next line (`to_end`: every line to its end), as {"lines": [{"line", "speaker",
## "result"}], "scene": {...}}. With `on_chunk`, the lines stream: `on_chunk(body)` gets each
## `scene.next.chunk` body ({"line", "speaker", "seq", "text", "attempt"}) in order.
func scene_next(
	scene_id: String, to_end: bool = false, on_chunk: Callable = Callable(), timeout_ms: int = -1
) -> LoreguardResult:
	var body := {"scene_id": scene_id, "to_end": to_end, "stream": on_chunk.is_valid()}
	var result := await request("scene.next", body, timeout_ms, on_chunk)
	if debug_forwarder != null:
		debug_forwarder.pull()
	return result


## Words said into a scene: every NPC there hears and remembers them. `kind` is "player" or
## "narration" (what happens: "The bell tolls."); `to` (an NPC id) answers next.
func scene_say(scene_id: String, text: String, kind: String = "player", to: String = "") -> LoreguardResult:
	var body := {"scene_id": scene_id, "text": text, "kind": kind}
	if not to.is_empty():
		body["to"] = to
	return await request("scene.say", body)


func scene_end(scene_id: String) -> LoreguardResult:
	return await request("scene.end", {"scene_id": scene_id})


func scene_get(scene_id: String) -> LoreguardResult:
	return await request("scene.get", {"scene_id": scene_id})


func _session_request(type: String, key: String, body: Dictionary) -> LoreguardResult:
	var pending := _make_pending(type, body, -1)
	_session.remember(type, key, body, pending if pending.result == null else null)
	if pending.result != null:
		return pending.result
	_submit(pending)
	if pending.result == null:
		await pending.done
	return pending.result


# `storage_failed` once per run of refused writes; `storage_recovered` on the next write that lands.
func _note_storage(type: String, result: LoreguardResult) -> void:
	if result.error != null and result.error.code == LoreguardError.STORAGE_UNAVAILABLE:
		if not storage_failing:
			storage_failing = true
			storage_failed.emit(str(result.error.details.get("reason", result.error.message)))
	elif result.ok and storage_failing and type in _WRITES:
		storage_failing = false
		storage_recovered.emit()


func _make_pending(type: String, body: Dictionary, timeout_ms: int) -> LoreguardPendingRequest:
	return _requests.make(type, body, timeout_ms if timeout_ms >= 0 else request_timeout_ms)


## Sends `pending` when the connection is usable; until then it waits (see `_open_session`).
func _submit(pending: LoreguardPendingRequest) -> void:
	if status.state == LoreguardSidecarStatus.State.FAILED:
		var why := "the sidecar is not running: " + status.reason
		pending.resolve(LoreguardResult.failure(LoreguardError.new(LoreguardError.SIDECAR_DOWN, why)))
	elif not (is_connected_to_sidecar() and _requests.send(pending)):
		_requests.hold(pending)


func _on_state_changed(state: LoreguardDealer.State) -> void:
	if state == LoreguardDealer.State.READY:
		_launcher.connection_ready()
		if _launcher.vetted:
			_open_session()
		else:
			_vet()
	elif state == LoreguardDealer.State.DISCONNECTED:
		# The sidecar may or may not have acted on these; waiting longer cannot tell.
		_fail_in_flight("the connection dropped before the reply: " + dealer.last_error)
		_launcher.connection_lost()
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
	for pending in _session.replay(_requests, request_timeout_ms):
		_submit(pending)
	for pending in _requests.take_waiting():
		_submit(pending)
	_launcher.session_opened()
	connected.emit()


## Asks what answers on the port for `hello`; LoreguardLauncher decides whether it may be used.
func _vet() -> void:
	var pending := _make_pending("hello", {"client": "loreguard-godot"}, VET_TIMEOUT_MS)
	if pending.result != null or not _requests.send(pending):
		return
	await pending.done
	var result := pending.result
	var dropped := not dealer.is_ready() or result.error != null and result.error.code == LoreguardError.SIDECAR_DOWN
	if _launcher.vetted or dropped:
		return  # the connection dropped meanwhile: the next one is checked again
	if _launcher.vet(result):
		_check_version(result.body)
		_open_session()


## Fails every request on the wire with `sidecar_down`; a designer-data request goes back in the
## queue instead, since the session replay sends it again.
func _fail_in_flight(why: String) -> void:
	_requests.fail_in_flight(why, _session.is_waiter)


## The launcher gave up (FAILED): requests waiting for a connection fail at once with
## `sidecar_down`, except designer data (sent on a reconnect).
func _refuse_waiting(why: String) -> void:
	_requests.refuse_waiting(why, _session.is_waiter)
