@icon("../icon.svg")
class_name LoreguardScene
extends Node
## NPCs talking to each other, and to the player, in one governed conversation. Each line is
## checked against its speaker's canon, rules and secrets, and remembered by the NPCs present.
##
##     $GateTalk.line_spoken.connect(func(npc: LoreguardNPC, line: LoreguardLine): print(line))
##     $GateTalk.begin()                        # e.g. the player comes near
##     $GateTalk.say("What are you two on about?")   # the player joins; the NPC named answers
##     $GateTalk.end()                          # the player walks away: a line still being
##                                              # spoken is dropped, its speaker stops thinking
##
## The speakers are the LoreguardNPC children (or `npcs`). Each line also goes through its
## speaker node as if the player had asked it: `thinking_started`, `dialogue_chunk`, `replied`
## and its routed intents, so a dialogue UI built for `LoreguardNPC.say()` shows scenes too.

## The scene started on the sidecar.
signal started
## `npc` is about to speak line `number` (it is thinking).
signal line_started(npc: LoreguardNPC, number: int)
## A validated piece of the line being spoken (with `stream`).
signal line_chunk(npc: LoreguardNPC, text: String)
## A line was spoken (validated, or an authored fallback: `line.fallback_used`).
signal line_spoken(npc: LoreguardNPC, line: LoreguardLine)
## The scene is over: "max_lines", "ended_by_request" (`end()`), or "failed" (a line could not
## be spoken, or the sidecar lost the scene).
signal ended(reason: String)
## A request failed; `error.code` is a LoreguardError code.
signal failed(error: LoreguardError)

## The scene's id on the sidecar; empty: the node's name.
@export var scene_id: String = ""
## The NPCs who speak, in turn order; empty: the LoreguardNPC children, in tree order.
@export var npcs: Array[NodePath] = []
## NPCs who are there and listen (they remember what they heard) but do not speak.
@export var listeners: Array[NodePath] = []
## What the scene is about, as the NPCs are told it.
@export_multiline var topic: String = ""
## Where it happens (rules may select on it); empty: the current scene's name.
@export var location: String = ""
## The player hears the scene from its start.
@export var player_present: bool = false
## The player may say something into the scene (`say()`), joining it.
@export var player_may_join: bool = true
## NPC lines after which the scene ends by itself.
@export_range(1, 64) var max_lines: int = 6
## Turn weights by NPC id (default 1): 2 speaks about twice as often.
@export var weights: Dictionary = {}
## Lines stream: `line_chunk` (and the speaker's `dialogue_chunk`) for each sentence as it passes.
@export var stream: bool = true
## After `begin()`, keep asking for the next line until the scene ends; off: call `next_line()`.
@export var auto_continue: bool = true
## Seconds to wait after a line before asking for the next (time to read it).
@export_range(0.0, 30.0, 0.1) var pause_between_lines_s: float = 1.5
## The client to use; empty: the `Loreguard` autoload.
@export var client_path: NodePath

## True from `begin()` until the scene ends.
var is_running: bool = false
## NPC lines spoken so far.
var lines_spoken: int = 0
var _speakers: Dictionary = {}  # npc id -> LoreguardNPC
## Which `begin()` the running loop belongs to: a loop of an earlier run stops at once.
var _run_id: int = 0


## The scene's id on the sidecar.
func id() -> String:
	return scene_id if not scene_id.is_empty() else String(name)


## The client this scene talks through.
func client() -> LoreguardClient:
	var node := get_node_or_null(client_path) if not client_path.is_empty() else get_node_or_null("/root/Loreguard")
	return node as LoreguardClient


## The speaking NPC nodes, in turn order.
func speakers() -> Array[LoreguardNPC]:
	var out: Array[LoreguardNPC] = []
	if npcs.is_empty():
		for child in get_children():
			if child is LoreguardNPC:
				out.append(child)
	else:
		for path in npcs:
			var npc := get_node_or_null(path) as LoreguardNPC
			if npc != null:
				out.append(npc)
	return out


## Starts the scene on the sidecar (its NPCs must be registered: they register when they enter
## the tree), then, with `auto_continue`, runs it line by line until it ends. With a sidecar that
## failed for good it fails at once (`sidecar_down`), as a line would.
func begin() -> LoreguardResult:
	var loreguard := client()
	if loreguard == null:
		return _fail(LoreguardError.new(LoreguardError.CLIENT, "%s: no Loreguard client" % name))
	var speaking := speakers()
	_speakers.clear()
	var ids := PackedStringArray()
	for npc in speaking:
		if not await _registered(npc, loreguard):
			return _fail(_not_running(npc))
		ids.append(npc.profile.id)
		_speakers[npc.profile.id] = npc
	var listening := PackedStringArray()
	for path in listeners:
		var npc := get_node_or_null(path) as LoreguardNPC
		if npc != null:
			if not await _registered(npc, loreguard):
				return _fail(_not_running(npc))
			listening.append(npc.profile.id)
	var options := {
		"listeners": Array(listening),
		"player_present": player_present,
		"player_may_join": player_may_join,
		"topic": topic,
		"location": location if not location.is_empty() else _current_scene_name(),
		"max_lines": max_lines,
		"weights": weights,
	}
	var result := await loreguard.scene_start(id(), ids, options)
	if not result.ok:
		return _fail(result.error)
	is_running = true
	lines_spoken = 0
	_run_id += 1
	started.emit()
	if auto_continue:
		_run.call_deferred(_run_id)
	return result


## Speaks the scene's next line; the result's body is the `scene.next` reply.
func next_line() -> LoreguardResult:
	var loreguard := client()
	var run_id := _run_id
	var state: Variant = (await loreguard.scene_get(id())).body
	if not is_running or run_id != _run_id:  # ended meanwhile: no line is asked for
		return _ended_meanwhile()
	var speaker: LoreguardNPC = _speakers.get(state.get("next_speaker", "") if state is Dictionary else "")
	if speaker != null:
		speaker.begin_line()
		line_started.emit(speaker, lines_spoken + 1)
	var result := await loreguard.scene_next(id(), false, _on_chunk.bind(run_id) if stream else Callable())
	if not is_running or run_id != _run_id:
		# The scene ended while the line was being spoken (the player walked away): nobody is
		# there to hear it, so it is dropped, and its speaker stops thinking.
		_stop_thinking()
		return _ended_meanwhile()
	if not result.ok:
		if speaker != null:
			speaker.finish_line(result)
		failed.emit(result.error)
		await _finish_if_over()
		if is_running:  # a line that could not be spoken ends the scene, there and here
			await loreguard.scene_end(id())
			_finish("failed")
		return result
	for entry: Variant in result.body.get("lines", []):
		var npc: LoreguardNPC = _speakers.get(str(entry.get("speaker", "")))
		var line := LoreguardLine.from_reply(entry.get("result", {}))
		lines_spoken += 1
		if speaker != null and speaker != npc and speaker.is_thinking:
			# words said meanwhile handed the turn to another NPC
			speaker.is_thinking = false
			speaker.thinking_finished.emit()
		if npc != null:
			if not npc.is_thinking:
				npc.begin_line()
			var as_reply := LoreguardResult.success("interact.ok", entry.get("result", {}))
			as_reply.line = line
			npc.finish_line(as_reply)
		line_spoken.emit(npc, line)
	var scene: Dictionary = result.body.get("scene", {})
	if bool(scene.get("ended", false)):
		_finish(str(scene.get("end_reason", "max_lines")))
	return result


## The player (kind "player") or the game ("narration") says something into the scene; every
## NPC there hears it. The NPC named in it, or `to` (an NPC id), answers next.
func say(text: String, kind: String = "player", to: String = "") -> LoreguardResult:
	var result := await client().scene_say(id(), text, kind, to)
	if not result.ok:
		failed.emit(result.error)  # a refused line changes nothing: the scene goes on
		await _finish_if_over()
	return result


## Ends the scene (the player walked away): no line is asked for after the one being spoken.
func end() -> LoreguardResult:
	if not is_running:
		return LoreguardResult.success("scene.end.ok", {})
	# Over here at once: a line still being spoken is dropped when it arrives (`next_line`).
	_finish("ended_by_request")
	_stop_thinking()
	return await client().scene_end(id())


func _run(run_id: int) -> void:
	while is_running and run_id == _run_id:
		var result := await next_line()
		if not result.ok or not is_running or run_id != _run_id:
			return
		if pause_between_lines_s > 0.0:
			await get_tree().create_timer(pause_between_lines_s).timeout


func _on_chunk(body: Dictionary, run_id: int) -> void:
	if not is_running or run_id != _run_id:
		return  # a line of a scene that has ended
	var npc: LoreguardNPC = _speakers.get(str(body.get("speaker", "")))
	var text := str(body.get("text", ""))
	if npc != null:
		npc.chunk_line(text)
	line_chunk.emit(npc, text)


func _finish(reason: String) -> void:
	if not is_running:
		return
	is_running = false
	ended.emit(reason)


## Every speaker still thinking stops: its line will not be heard.
func _stop_thinking() -> void:
	for npc: LoreguardNPC in _speakers.values():
		if npc.is_thinking:
			npc.is_thinking = false
			npc.thinking_finished.emit()


## Waits for `npc` to be registered on the sidecar; false when the sidecar failed for good
## (a launch that cannot start): the registration will never come.
func _registered(npc: LoreguardNPC, loreguard: LoreguardClient) -> bool:
	while not npc.is_registered:
		if loreguard.status.state == LoreguardSidecarStatus.State.FAILED:
			return false
		await get_tree().process_frame
	return true


func _not_running(npc: LoreguardNPC) -> LoreguardError:
	return LoreguardError.new(
		LoreguardError.SIDECAR_DOWN, "%s: the sidecar is not running, so %s cannot take part" % [name, npc.name]
	)


func _ended_meanwhile() -> LoreguardResult:
	return LoreguardResult.failure(LoreguardError.new(LoreguardError.CLIENT, "%s: the scene has ended" % name))


func _fail(error: LoreguardError) -> LoreguardResult:
	failed.emit(error)
	return LoreguardResult.failure(error)


## After a failed request: asks the sidecar where the scene stands, and ends it here when it is
## over there (ended, or unknown to a restarted sidecar). A refusal of one request (a bad `to`,
## a line that timed out) leaves the scene going on.
func _finish_if_over() -> void:
	if not is_running:
		return
	var state := await client().scene_get(id())
	if not state.ok and state.error.code == LoreguardError.NOT_FOUND:
		_finish("failed")
	elif state.ok and bool(state.body.get("ended", false)):
		_finish(str(state.body.get("end_reason", "max_lines")))


func _current_scene_name() -> String:
	var current := get_tree().current_scene if is_inside_tree() else null
	return String(current.name) if current != null else ""
