@icon("../icon.svg")
class_name LoreguardNPC
extends Node
## Puts an NPC under Loreguard: give it a profile and rule sets in the inspector, then call
## `say()` from your dialogue UI.
##
##     $Guard.replied.connect(func(line: LoreguardLine): $Panel.show_line(line.dialogue))
##     $Guard.route("open_gate", func(params: Dictionary): $Gate.open(params["gate_id"]))
##     $Guard.say("Can I come in?")
##
## The NPC registers itself with the sidecar when it enters the tree (and again after every
## reconnect). Approved world intents go to the callable routed for their type, and are also
## emitted as `intent_received`.

## A line to show: validated, or an authored fallback when the model's line was refused
## (`line.fallback_used`). `line.intents` are the approved intents, dispatched right after.
signal replied(line: LoreguardLine)
## An approved world intent, e.g. `open_gate` with {"gate_id": "north"}; emitted after `replied`.
signal intent_received(intent: LoreguardWorldIntent)
## The request failed; `error.code` is a LoreguardError code.
signal failed(error: LoreguardError)
## The sidecar accepted this NPC's profile and rules.
signal registered
## A request for a line went out: show that the NPC is thinking (a model takes seconds).
signal thinking_started
## The answer (or the failure) is in; emitted before `replied` or `failed`.
signal thinking_finished
## With `stream` on: the next validated piece of the reply (a sentence), as soon as it passed the
## gate; `replied` still follows with the whole line (the chunks add up to `line.dialogue`).
signal dialogue_chunk(text: String)
## The line on its way was cancelled (`cancel()`): nobody hears it, and the NPC remembers none of
## it; emitted after `thinking_finished`, in place of `replied`.
signal line_cancelled
## The NPC's warm-up is done (`is_warm`): its first line starts about as soon as later ones.
signal warmed_up

## Who this NPC is: persona, facts, secrets, allowed intents, fallbacks.
@export var profile: LoreguardNpcProfile
## Rule sets, in order; their rules are registered with the profile.
@export var rules: Array[LoreguardRuleSet] = []
## The scene name sent with each interaction (rules may select on it). Empty: the current scene.
@export var scene_name: String = ""
## Tags sent with each interaction (rules may select on them).
@export var tags: PackedStringArray
## The client to use; empty: the `Loreguard` autoload.
@export var client_path: NodePath
## Stream replies: emit `dialogue_chunk` for each sentence as it passes the gate, before `replied`.
@export var stream: bool = false
## With `stream`: speak each chunk with the OS voice (DisplayServer.tts_speak; needs the project
## setting audio/general/text_to_speech).
@export var speak_chunks: bool = false
## The OS voice id for `speak_chunks`; empty: the first voice for the game's language.
@export var tts_voice: String = ""
## After registering, ask the sidecar to warm this NPC (`npc.warm`): its prompt is evaluated in
## idle time, so its first line starts about as soon as later ones. Off: nothing is sent.
@export var warm_up: bool = true

## The last result, for debugging and UI; `last_result.line` is the last line on success.
var last_result: LoreguardResult
## Set once `npc.register` succeeded.
var is_registered: bool = false
## True between `thinking_started` and `thinking_finished`.
var is_thinking: bool = false
## Its warm-up is done (or none was asked for): a game says "getting ready" until then.
var is_warm: bool = false
var _routes: Dictionary = {}


func _ready() -> void:
	if Engine.is_editor_hint():
		return
	register()


## Leaving the tree (a scene change, a closed dialogue) cancels the line on its way: nobody is
## there to hear it, so the NPC remembers none of it.
func _exit_tree() -> void:
	if is_thinking and not Engine.is_editor_hint():
		cancel()


## The client this NPC talks through.
func client() -> LoreguardClient:
	var node := get_node_or_null(client_path) if not client_path.is_empty() else get_node_or_null("/root/Loreguard")
	return node as LoreguardClient


## Sends the profile and rules (`npc.register`). Called on ready; call again after editing them.
func register() -> LoreguardResult:
	var missing := _missing()
	if missing != null:
		return missing
	var loreguard := client()
	var result := await loreguard.register_npc(profile, rules)
	is_registered = result.ok
	if result.ok:
		registered.emit()
		if warm_up:
			loreguard.warm(profile.id)  # answered at once; a refusal changes nothing
			_watch_warm_up(loreguard)
		else:
			_warmed()
	else:
		failed.emit(result.error)
	return result


## Stops the line on its way (the player walked away, skipped it, closed the dialogue): the
## sidecar stops generating it and the NPC remembers none of it; `line_cancelled` follows. False
## when no line is on its way.
func cancel() -> bool:
	return profile != null and client() != null and client().cancel_line(profile.id)


## Routes approved intents of `intent_type` to `handler(params: Dictionary)`.
func route(intent_type: String, handler: Callable) -> void:
	_routes[intent_type] = handler


## The player says `text` to this NPC. On success `result.line` is what `replied` carried.
func say(text: String) -> LoreguardResult:
	return await interact("player_utterance", text)


## Any interaction: `trigger_reason` is one of the protocol's trigger reasons; `extra` adds
## InteractionContext fields (e.g. {"trigger_prompt": "greet the player"}).
func interact(trigger_reason: String, player_input: String = "", extra: Dictionary = {}) -> LoreguardResult:
	var missing := _missing()
	if missing != null:
		return missing
	var loreguard := client()
	var context := {
		"npc_id": profile.id,
		"trigger_reason": trigger_reason,
		"player_input": player_input,
		"scene": scene_name if not scene_name.is_empty() else _current_scene_name(),
		"tags": Array(tags),
	}
	context.merge(extra, true)
	begin_line()
	var result := await loreguard.interact(context, -1, _on_chunk if stream else Callable())
	return finish_line(result)


## A line of this NPC's is on its way (a `LoreguardScene` calls this for its lines, as `say()`
## does): emits `thinking_started`.
func begin_line() -> void:
	is_thinking = true
	thinking_started.emit()


## A streamed piece of the line on its way: emits `dialogue_chunk` (and speaks it, with
## `speak_chunks`).
func chunk_line(text: String) -> void:
	_on_chunk({"text": text})


## The line on its way is in, or failed: emits `thinking_finished`, then `replied` and the
## approved intents (or `failed`), exactly as for `say()`.
func finish_line(result: LoreguardResult) -> LoreguardResult:
	is_thinking = false
	thinking_finished.emit()
	last_result = result
	if not result.ok and result.error.code == LoreguardError.CANCELLED:
		line_cancelled.emit()
		return result
	if not result.ok:
		return _fail(result)
	replied.emit(result.line)
	for intent in result.line.intents:
		_dispatch(intent)
	return result


## A failed result when there is no profile or no client to send through, else null.
func _missing() -> LoreguardResult:
	if profile != null and client() != null:
		return null
	var why := "no profile set" if profile == null else "no Loreguard client (enable the Loreguard plugin)"
	return _fail(LoreguardResult.failure(LoreguardError.new(LoreguardError.CLIENT, "%s: %s" % [name, why])))


## Waits on the sidecar's word that the warm-up is done (`npc.status` with `wait`: the reply
## comes then). A reply that does not come in the request's time is asked for again; a refusal
## (a sidecar gone) leaves the NPC not warm (its lines still come, later).
func _watch_warm_up(loreguard: LoreguardClient) -> void:
	is_warm = false
	while is_inside_tree():
		var status := await loreguard.npc_status(profile.id, true)
		if status.ok and bool(status.body.get("ready", false)):
			_warmed()
			return
		if not status.ok and status.error.code != LoreguardError.NO_REPLY:
			return


func _warmed() -> void:
	is_warm = true
	warmed_up.emit()


func _on_chunk(body: Dictionary) -> void:
	var text := str(body.get("text", ""))
	dialogue_chunk.emit(text)
	if speak_chunks:
		_speak(text)


func _speak(text: String) -> void:
	var voice := tts_voice
	if voice.is_empty():
		var voices := DisplayServer.tts_get_voices_for_language(TranslationServer.get_locale().left(2))
		if voices.is_empty():
			return  # no OS voice (or text-to-speech is off in the project settings)
		voice = voices[0]
	DisplayServer.tts_speak(text, voice)


func _dispatch(intent: LoreguardWorldIntent) -> void:
	if _routes.has(intent.type):
		(_routes[intent.type] as Callable).call(intent.params)
	intent_received.emit(intent)


func _fail(result: LoreguardResult) -> LoreguardResult:
	last_result = result
	failed.emit(result.error)
	return result


func _current_scene_name() -> String:
	var current := get_tree().current_scene if is_inside_tree() else null
	return String(current.name) if current != null else ""
