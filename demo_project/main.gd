extends Control
## The Loreguard demo: talk to Brom, the guard at the north gate, and Mira, the river merchant.
## Every line comes from the sidecar, validated against their rules; Brom can open the gate and
## Mira can hand you an item, and the scene changes only when the sidecar approved the intent.

## The world's lore, facts and rules, sent to the sidecar when the scene starts.
@export var world: LoreguardWorld

## Set when Brom's `open_gate` intent arrived.
var gate_open: bool = false
## Item name -> count, filled by Mira's `give_item` intents.
var inventory: Dictionary = {}

## Replies stream: each sentence is typed out as soon as the sidecar's gate has passed it.
var _typewriter := LoreguardTypewriter.new()
## The NPC whose streamed reply is being typed (its name already shown), or null.
var _speaking: LoreguardNPC

# The autoload by path, so the script type-checks without the autoload registered.
@onready var _loreguard: LoreguardClient = get_node("/root/Loreguard")
@onready var _guard: LoreguardNPC = $Guard
@onready var _merchant: LoreguardNPC = $Merchant
@onready var _gate: ColorRect = $Town/Wall/Gate
@onready var _gate_label: Label = $Town/GateLabel
@onready var _inventory_label: Label = $Town/Inventory
@onready var _status: Label = $Panel/Status
@onready var _picker: OptionButton = $Panel/NpcPicker
@onready var _dialogue: RichTextLabel = $Panel/Dialogue
@onready var _input: LineEdit = $Panel/InputRow/Input
@onready var _send_button: Button = $Panel/InputRow/Send


func _ready() -> void:
	_typewriter.label = _dialogue
	add_child(_typewriter)
	for npc: LoreguardNPC in _npcs():
		_picker.add_item(npc.profile.display_name)
		npc.stream = true
		npc.dialogue_chunk.connect(_on_chunk.bind(npc))
		npc.replied.connect(_on_replied.bind(npc))
		npc.failed.connect(_on_failed.bind(npc))
	_guard.route("open_gate", _open_gate)
	_merchant.route("give_item", _give_item)
	_loreguard.connected.connect(func() -> void: _status.text = "Connected to the sidecar at %s" % _loreguard.address)
	_loreguard.disconnected.connect(
		func(why: String) -> void: _status.text = "Sidecar unreachable (%s); retrying..." % why
	)
	_input.text_submitted.connect(func(_text: String) -> void: send())
	_send_button.pressed.connect(send)
	_loreguard.load_world(world)
	_input.grab_focus()


## Sends the text box's line to the NPC picked above it.
func send() -> void:
	var text := _input.text.strip_edges()
	if text.is_empty() or not _input.editable:
		return
	var npc: LoreguardNPC = _npcs()[_picker.selected]
	_input.clear()
	_input.editable = false
	_typewriter.finish()
	_dialogue.append_text("[color=#9ab]You → %s:[/color] %s\n" % [npc.profile.display_name, _escape(text)])
	await npc.say(text)
	_input.editable = true
	_input.grab_focus()


func _npcs() -> Array[LoreguardNPC]:
	return [_guard, _merchant]


func _on_chunk(text: String, npc: LoreguardNPC) -> void:
	if _speaking != npc:
		_speaking = npc
		_typewriter.type_text("[b]%s:[/b] " % npc.profile.display_name)
	_typewriter.type_text(_escape(text))


func _on_replied(line: LoreguardLine, npc: LoreguardNPC) -> void:
	var note := " [i](%s)[/i]" % line.emotion if line.emotion != "neutral" else ""
	if _speaking == npc:  # the line was typed chunk by chunk: only the emotion is left
		_typewriter.type_text("%s\n" % note)
	else:
		_typewriter.type_text("[b]%s:[/b] %s%s\n" % [npc.profile.display_name, _escape(line.dialogue), note])
	_speaking = null


func _on_failed(error: LoreguardError, npc: LoreguardNPC) -> void:
	if _speaking != null:
		_typewriter.type_text("\n")
		_speaking = null
	_typewriter.finish()
	_dialogue.append_text(
		"[color=#e77]%s could not answer: %s[/color]\n" % [npc.profile.display_name, _escape(str(error))]
	)


func _open_gate(params: Dictionary) -> void:
	if gate_open:
		return
	gate_open = true
	_gate_label.text = "The %s gate is open." % params.get("gate_id", "north")
	create_tween().tween_property(_gate, "size:y", 0.0, 0.8)
	# Tell the sidecar, so Brom's memory of the world matches the scene.
	_loreguard.set_state({"gate.north": "open"})


func _give_item(params: Dictionary) -> void:
	var item := str(params.get("item", "?"))
	inventory[item] = int(inventory.get(item, 0)) + int(params.get("count", 1))
	var lines := PackedStringArray()
	for key: String in inventory:
		lines.append("%s × %d" % [key, inventory[key]])
	_inventory_label.text = "Your pack: " + ", ".join(lines)


func _escape(text: String) -> String:
	return text.replace("[", "[lb]")
