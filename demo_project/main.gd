extends Control
## The Loreguard demo: talk to Brom, the guard at the north gate, and Mira, the river merchant.
## Every line comes from the sidecar, validated against their rules; Brom can open the gate and
## Mira can hand you an item, and the scene changes only when the sidecar approved the intent.
## The panel shows what the governance did: fallback lines are marked, approved intents listed,
## and the toggle shows, per line, each attempt the model made, why one was refused, and how long
## the line took. Stand by the gate and Brom and Mira talk to each other (a LoreguardScene); pick
## "Brom and Mira" to join their talk, and walk away to leave them to it.

## The town's width beside the talk panel (stretch ratios), without and with the governance view.
const TOWN_WIDTH := 0.75
const TOWN_WIDTH_WITH_GOVERNANCE := 0.5
## The picker's entry that speaks into Brom and Mira's talk at the gate.
const TOGETHER := "Brom and Mira (join their talk)"

## The world's lore, facts and rules, sent to the sidecar when the scene starts.
@export var world: LoreguardWorld

## Set when Brom's `open_gate` intent arrived.
var gate_open: bool = false
## Item name -> count, filled by Mira's `give_item` intents.
var inventory: Dictionary = {}
## Every intent the sidecar approved, as "type(params)", in order.
var approved_intents: PackedStringArray = []
## The player's coin in the world's smallest currency (`world.purse`): a sale the sidecar's
## rules made takes its price from here, and the sidecar is told the new purse.
var purse: int = 0
## World-state key -> how many are left, for the wares whose stock the world tracks.
var stock: Dictionary = {}
## How many lines the NPCs said: each line's number, "#3" in the dialogue and the governance view.
var lines_said: int = 0

## When the line being waited for was asked for: the player's words, or the scene asking its
## next speaker (a line of Brom and Mira's own talk is not timed from the player's last words).
var _sent_at_ms: int = 0
## The player said something and waits for the answer (its time counts from their words).
var _player_waiting: bool = false
## Line number -> the dialogue paragraph it starts at.
var _line_paragraphs: Dictionary = {}
var _dots_phase: float = 0.0

## Replies stream: each sentence is typed out as soon as the sidecar's gate has passed it.
var _typewriter := LoreguardTypewriter.new()
## The NPC whose streamed reply is being typed (its name already shown), or null.
var _speaking: LoreguardNPC
# What `storage_failed` or `storage_recovered` said, told once the line it came with has ended.
var _storage_note: String = ""

# The autoload by path, so the script type-checks without the autoload registered.
@onready var _loreguard: LoreguardClient = get_node("/root/Loreguard")
@onready var _guard: LoreguardNPC = $Guard
@onready var _merchant: LoreguardNPC = $Merchant
@onready var _gate_talk: LoreguardScene = $GateTalk
@onready var _town: Control = $Margin/Columns/Town
@onready var _near_gate: CheckButton = %NearGate
@onready var _gate: ColorRect = %Gate
@onready var _gate_label: Label = %GateLabel
@onready var _inventory_label: Label = %Inventory
@onready var _purse_label: Label = %Purse
@onready var _stall_label: Label = %StallLabel
@onready var _intents_label: Label = %Intents
@onready var _status: Label = %Status
@onready var _picker: OptionButton = %NpcPicker
@onready var _dialogue: RichTextLabel = %Dialogue
@onready var _thinking: Control = %Thinking
@onready var _dots: Label = %Dots
@onready var _thinking_label: Label = %ThinkingLabel
@onready var _governance_toggle: CheckButton = %GovernanceToggle
@onready var _governance: LoreguardGovernanceLog = %Governance
@onready var _input: LineEdit = %Input
@onready var _send_button: Button = %Send


func _ready() -> void:
	_typewriter.label = _dialogue
	_typewriter.skip_on_any_key = true  # a click on the dialogue, or any key, shows the rest at once
	add_child(_typewriter)
	for npc: LoreguardNPC in _npcs():
		_picker.add_item(npc.profile.display_name)
		npc.stream = true
		npc.dialogue_chunk.connect(_on_chunk.bind(npc))
		npc.replied.connect(_on_replied.bind(npc))
		npc.failed.connect(_on_failed.bind(npc))
		npc.thinking_started.connect(_on_thinking.bind(npc, true))
		npc.thinking_finished.connect(_on_thinking.bind(npc, false))
		npc.line_cancelled.connect(_on_cancelled.bind(npc))
		npc.warmed_up.connect(func() -> void: _show_status(_loreguard.status))
	_picker.add_item(TOGETHER)
	_near_gate.toggled.connect(_walk_to_gate)
	_gate_talk.started.connect(func() -> void: _narrate("Brom and Mira are talking at the gate."))
	_gate_talk.ended.connect(_on_talk_ended)
	_gate_talk.failed.connect(_on_talk_failed)
	_guard.route("open_gate", _open_gate)
	_merchant.route("give_item", _give_item)
	_loreguard.status_changed.connect(_show_status)
	_show_status(_loreguard.status)
	_governance_toggle.toggled.connect(_show_governance)
	_governance.line_clicked.connect(show_line)
	# A problem for the game's developer (already in the Output panel): the status line's tooltip.
	_loreguard.sidecar_problem.connect(func(message: String) -> void: _status.tooltip_text = message)
	# Said once when saving starts failing (not per line), and once when it works again: after
	# the line it came with, whose streamed words are on screen already.
	_loreguard.storage_failed.connect(
		func(reason: String) -> void: _storage_note = "The game could not save what was said (%s)." % reason
	)
	_loreguard.storage_recovered.connect(func() -> void: _storage_note = "The game can save what is said again.")
	_input.text_submitted.connect(func(_text: String) -> void: send())
	_send_button.pressed.connect(send)
	_loreguard.load_world(world)
	_loreguard.new_game()  # every launch is a new game: the same words get other answers
	purse = int(world.initial_state.get(world.purse, 0))
	for npc: LoreguardNPC in _npcs():
		for spec: LoreguardIntent in npc.profile.allowed_intents:
			for ware: Dictionary in spec.wares.values():
				if ware.has("stock"):
					stock[ware["stock"]] = int(world.initial_state.get(ware["stock"], 0))
	_show_purse()
	_input.grab_focus()


func _process(delta: float) -> void:
	if _thinking.visible:
		_dots_phase = fmod(_dots_phase + delta * 3.0, 3.0)
		_dots.text = ["o..", ".o.", "..o"][int(_dots_phase)]


## Sends the text box's line to the NPC picked above it (or into Brom and Mira's talk).
func send() -> void:
	var text := _input.text.strip_edges()
	if text.is_empty() or not _input.editable:
		return
	if _picker.get_item_text(_picker.selected) == TOGETHER:
		_input.clear()
		_dialogue.append_text("[color=#9ab]You → Brom and Mira:[/color] %s\n" % _escape(text))
		_sent_at_ms = Time.get_ticks_msec()
		_player_waiting = true
		if not _gate_talk.is_running:
			_near_gate.set_pressed_no_signal(true)
			_gate_talk.player_present = true
			await _gate_talk.begin()
		await _gate_talk.say(text)
		return
	var npc: LoreguardNPC = _npcs()[_picker.selected]
	_input.clear()
	_input.editable = false
	_typewriter.finish()
	_dialogue.append_text("[color=#9ab]You → %s:[/color] %s\n" % [npc.profile.display_name, _escape(text)])
	if not npc.is_warm:
		_narrate("%s is still getting ready: this first answer takes longer." % npc.profile.display_name)
	_sent_at_ms = Time.get_ticks_msec()
	_player_waiting = true
	await npc.say(text)
	_input.editable = true
	_input.grab_focus()


## The sidecar's state in the player's words; the technical detail is the tooltip.
func player_status(status: LoreguardSidecarStatus) -> String:
	match status.state:
		LoreguardSidecarStatus.State.STARTING:
			return "Waking up the townsfolk..."
		LoreguardSidecarStatus.State.DOWNLOADING_MODEL:
			if status.download_total_mib <= 0.0:
				return "Fetching the townsfolk's minds (%d MiB so far)..." % int(status.download_done_mib)
			if status.download_fraction() >= 1.0:
				return "Fetched the townsfolk's minds; checking them..."
			return (
				"Fetching the townsfolk's minds: %d%% of %d MiB..."
				% [int(status.download_fraction() * 100), int(status.download_total_mib)]
			)
		LoreguardSidecarStatus.State.LOADING_MODEL:
			return "The townsfolk are waking up (loading their minds: %d s)..." % int(status.loading_s)
		LoreguardSidecarStatus.State.READY:
			var warming := _npcs().filter(func(npc: LoreguardNPC) -> bool: return not npc.is_warm)
			if warming.is_empty():
				return "Brom and Mira are ready to talk. (Esc walks away from a line.)"
			var names := " and ".join(warming.map(func(npc: LoreguardNPC) -> String: return npc.profile.display_name))
			return "%s %s getting ready..." % [names, "is" if warming.size() == 1 else "are"]
		LoreguardSidecarStatus.State.MODEL_UNREACHABLE:
			return "The townsfolk's minds are far away (the model server is unreachable); they keep to set phrases."
		LoreguardSidecarStatus.State.RESTARTING:
			if status.attempt == 0:
				return "The townsfolk lost their train of thought; reconnecting..."
			return (
				"The townsfolk lost their train of thought; bringing them back (try %d of %d)..."
				% [status.attempt, status.max_attempts]
			)
	if status.cause == LoreguardSidecarStatus.SAVE_IN_USE:
		return "The townsfolk cannot talk: another copy of the game is using this save. Close it, then start again."
	# FAILED: the reason names the fix for the game's developer (a launch command that cannot
	# start, say): it is in the Output panel and this line's tooltip, not in the player's face.
	return "The townsfolk cannot talk: the dialogue engine did not start (details in the Output panel)."


func _show_status(status: LoreguardSidecarStatus) -> void:
	_status.text = player_status(status)
	_status.tooltip_text = status.reason


func _npcs() -> Array[LoreguardNPC]:
	return [_guard, _merchant]


## The player comes near the gate (Brom and Mira start talking) or walks away (they stop).
func _walk_to_gate(near: bool) -> void:
	if near and not _gate_talk.is_running:
		_gate_talk.player_present = true
		await _gate_talk.begin()
	elif not near and _gate_talk.is_running:
		await _gate_talk.end()


func _on_talk_ended(reason: String) -> void:
	_near_gate.set_pressed_no_signal(false)
	_narrate("You walk away from the gate." if reason == "ended_by_request" else "Brom and Mira fall silent.")


func _on_talk_failed(error: LoreguardError) -> void:
	if not _gate_talk.is_running:
		_near_gate.set_pressed_no_signal(false)
	_tell_storage_note()
	if error.code == LoreguardError.STORAGE_UNAVAILABLE:
		return
	_dialogue.append_text("[color=#e77]Brom and Mira cannot talk: %s[/color]\n" % _escape(_why_not(error)))


## Why a line or the scene could not be spoken, in the player's words.
func _why_not(error: LoreguardError) -> String:
	if error.code != LoreguardError.SIDECAR_DOWN:
		return str(error)
	if _loreguard.status.state == LoreguardSidecarStatus.State.FAILED:
		return "the dialogue engine is not running (see the status line)"
	return "lost the train of thought (the dialogue engine stopped); try again in a moment"


func _tell_storage_note() -> void:
	if not _storage_note.is_empty():
		_narrate(_escape(_storage_note))
		_storage_note = ""


func _narrate(text: String) -> void:
	_typewriter.finish()
	_dialogue.append_text("[color=#7f93a6][i]%s[/i][/color]\n" % text)


func _on_thinking(npc: LoreguardNPC, thinking: bool) -> void:
	if thinking and not _player_waiting:
		_sent_at_ms = Time.get_ticks_msec()  # the scene asked this NPC for its line just now
	_thinking.visible = thinking
	_thinking_label.text = "%s is thinking" % npc.profile.display_name


func _on_chunk(text: String, npc: LoreguardNPC) -> void:
	if _speaking != npc:
		_speaking = npc
		_typewriter.type_text(_start_line(npc))
	_typewriter.type_text(_escape(text))


func _on_replied(line: LoreguardLine, npc: LoreguardNPC) -> void:
	lines_said += 1
	var latency_ms := Time.get_ticks_msec() - _sent_at_ms
	_player_waiting = false
	var note := " [i](%s)[/i]" % line.emotion if line.emotion != "neutral" else ""
	var marker := " [bgcolor=#7a4a12][color=#ffd9a0] FALLBACK [/color][/bgcolor]" if line.fallback_used else ""
	if _speaking == npc:  # the line was typed chunk by chunk: only the emotion and marker are left
		_typewriter.type_text("%s%s\n" % [note, marker])
	else:
		_typewriter.type_text("%s%s%s%s\n" % [_start_line(npc), _escape(line.dialogue), note, marker])
	_speaking = null
	for intent in line.intents:
		var shown := _intent_text(intent)
		approved_intents.append(shown)
		_typewriter.type_text("[color=#8c8]   approved: %s[/color]\n" % _escape(shown))
		_settle(intent, npc)
	for deal: Dictionary in line.body.get("receipt", {}).get("deals", []):
		if not deal.get("granted", true):
			_typewriter.type_text("[color=#e9a]   no sale: %s[/color]\n" % _escape(str(deal.get("reason", ""))))
	if not line.intents.is_empty():
		_intents_label.text = "Approved by the rules: " + ", ".join(approved_intents)
	_tell_storage_note()
	# A line of Brom and Mira's talk answers the other NPC (or the player who joined it).
	var trigger := "npc_interaction" if _gate_talk.is_running else "player_utterance"
	_governance.add_line(lines_said, line, npc.profile.display_name, latency_ms, trigger)


## Shows or hides how each line was checked. Shown, it takes more of the panel than the dialogue
## and the town gives the panel some of its width: it is what a developer opened it to read.
func _show_governance(on: bool) -> void:
	_governance.visible = on
	_town.size_flags_stretch_ratio = TOWN_WIDTH_WITH_GOVERNANCE if on else TOWN_WIDTH


## Scrolls the dialogue to line `number` (the governance view's "#3" links here).
func show_line(number: int) -> void:
	if _line_paragraphs.has(number):
		_dialogue.scroll_to_paragraph(_line_paragraphs[number])


## The start of the next NPC line, "#3 Brom: ", numbered as its governance entry will be; notes
## the dialogue paragraph it starts so the entry's number can scroll back to it.
func _start_line(npc: LoreguardNPC) -> String:
	var number := lines_said + 1
	_line_paragraphs[number] = _dialogue.get_paragraph_count() - 1
	return "[color=#7f93a6]#%d[/color] [b]%s:[/b] " % [number, npc.profile.display_name]


## Esc while an NPC is thinking: the player walks away from the line. The sidecar stops it, and
## nobody remembers it (`LoreguardNPC.cancel`).
func _unhandled_key_input(event: InputEvent) -> void:
	if event.is_action_pressed("ui_cancel"):
		for npc: LoreguardNPC in _npcs():
			if npc.is_thinking and npc.cancel():
				get_viewport().set_input_as_handled()


func _on_cancelled(npc: LoreguardNPC) -> void:
	_player_waiting = false
	if _speaking == npc:
		_typewriter.type_text(" —\n")
		_speaking = null
		lines_said += 1  # the cut-off line keeps its number: the next one must not reuse it
	_narrate("You walk away; %s's answer goes unsaid, and unremembered." % npc.profile.display_name)
	_input.editable = true
	_input.grab_focus()


func _on_failed(error: LoreguardError, npc: LoreguardNPC) -> void:
	_player_waiting = false
	if _speaking != null:
		_typewriter.type_text("\n")
		_speaking = null
		lines_said += 1  # the cut-off line keeps its number: the next one must not reuse it
	_typewriter.finish()
	_tell_storage_note()
	if error.code == LoreguardError.STORAGE_UNAVAILABLE:
		return  # `storage_failed` said why, once; nothing of the line was kept
	_dialogue.append_text(
		"[color=#e77]%s could not answer: %s[/color]\n" % [npc.profile.display_name, _escape(_why_not(error))]
	)


func _open_gate(params: Dictionary) -> void:
	if gate_open:
		return
	gate_open = true
	_gate_label.text = "The %s gate is open." % params.get("gate_id", "north")
	# Anchors, not a size: the gate stays open when the window is resized.
	create_tween().tween_property(_gate, "anchor_bottom", _gate.anchor_top, 0.8)
	# Tell the sidecar, so Brom's memory of the world matches the scene.
	_loreguard.set_state({"gate.north": "open"})


func _give_item(params: Dictionary) -> void:
	var item := str(params.get("item", "?"))
	inventory[item] = int(inventory.get(item, 0)) + int(params.get("count", 1))
	var lines := PackedStringArray()
	for key: String in inventory:
		lines.append("%s × %d" % [key, inventory[key]])
	_inventory_label.text = "Your pack: " + ", ".join(lines)


## A sale the sidecar's rules made: its price leaves the purse and its wares the stock, and the
## sidecar hears both (it decides the next request on them).
func _settle(intent: LoreguardWorldIntent, npc: LoreguardNPC) -> void:
	if not intent.is_sale():
		return
	purse -= intent.payment_value()
	var state := {world.purse: purse}
	for spec: LoreguardIntent in npc.profile.allowed_intents:
		var ware: Dictionary = spec.wares.get(str(intent.params.get("item", "")), {})
		var key := str(ware.get("stock", ""))
		if spec.type == intent.type and stock.has(key):
			stock[key] = int(stock[key]) - int(intent.params.get("count", 1))
			state[key] = stock[key]
	_loreguard.set_state(state)
	_show_purse()


func _show_purse() -> void:
	_purse_label.text = "Your purse: %s" % money_text(purse)
	# Mira's wares, priced as her profile prices them, with what is left where the world counts it.
	var wares := PackedStringArray()
	for spec: LoreguardIntent in _merchant.profile.allowed_intents:
		var names := spec.wares.keys()
		names.sort()
		for item: String in names:
			var ware: Dictionary = spec.wares[item]
			var left := " (%d left)" % stock[ware["stock"]] if stock.has(ware.get("stock", "")) else ""
			wares.append("%s %d %s%s" % [item, int(ware.get("price", 0)), ware.get("currency", ""), left])
	_stall_label.text = "%s's stall: %s" % [_merchant.profile.display_name, ", ".join(wares)]


## Coin as a player reads it: "1 silver and 5 copper", the largest currencies first.
func money_text(value: int) -> String:
	var names := world.currencies.keys()
	names.sort_custom(func(a: String, b: String) -> bool: return int(world.currencies[a]) > int(world.currencies[b]))
	var parts := PackedStringArray()
	for name: String in names:
		var worth := int(world.currencies[name])
		if value >= worth:
			parts.append("%d %s" % [value / worth, name])
			value %= worth
	return " and ".join(parts) if not parts.is_empty() else "nothing"


func _intent_text(intent: LoreguardWorldIntent) -> String:
	var params := PackedStringArray()
	var keys := intent.params.keys()
	keys.sort()
	for key: Variant in keys:
		params.append("%s=%s" % [key, intent.params[key]])
	var price := " for %s" % intent.price_text() if intent.is_sale() else ""
	return "%s(%s)%s" % [intent.type, ", ".join(params), price]


func _escape(text: String) -> String:
	return text.replace("[", "[lb]")
