extends Node
## The demo scene played by script, as a player would: each line goes through the text box,
## then the scene must show both answers and the two approved intents (the gate opens, a
## lantern lands in the pack). Exits 0 only if every check held (tests/godot_addon/test_addon.py
## runs it against a scripted sidecar).
##
##     godot --path demo_project res://tests/smoke.tscn

const Demo := preload("res://main.gd")
const WATCHDOG_S := 90.0
## Gives the gate's 0.8 s tween room on a slow machine; the wait ends as soon as it is shut.
const GATE_DEADLINE_S := 5.0
## [NPC node in main.tscn, what the player types].
const LINES: Array[Array] = [
	["Guard", "Good evening. Could you open the gate for me?"],
	["Merchant", "A lantern, please. Here's 5 silver."],
]

@onready var _demo: Demo = $Main
@onready var _picker: OptionButton = $Main.get_node("%NpcPicker")
@onready var _input: LineEdit = $Main.get_node("%Input")
@onready var _dialogue: RichTextLabel = $Main.get_node("%Dialogue")
@onready var _gate: ColorRect = $Main.get_node("%Gate")
@onready var _inventory_label: Label = $Main.get_node("%Inventory")


func _ready() -> void:
	get_tree().create_timer(WATCHDOG_S).timeout.connect(
		func() -> void:
			printerr("demo smoke: watchdog fired after %d s" % WATCHDOG_S)
			get_tree().quit(2)
	)
	var failures := await _play()
	for failure in failures:
		printerr("demo smoke: FAIL ", failure)
	print("demo smoke: %d checks, %d failed" % [LINES.size() + 2, failures.size()])
	print(_dialogue.get_parsed_text())
	get_tree().quit(0 if failures.is_empty() else 1)


func _play() -> PackedStringArray:
	var loreguard: LoreguardClient = get_node("/root/Loreguard")
	if not loreguard.is_connected_to_sidecar():
		await loreguard.connected
	var failures := PackedStringArray()
	for step in LINES:
		var npc: LoreguardNPC = _demo.get_node(step[0])
		var shown_as := npc.profile.display_name
		_picker.select(_item_index(shown_as))
		_input.text = step[1]
		var before := _dialogue.get_parsed_text().length()
		await _demo.send()
		var shown := _dialogue.get_parsed_text().substr(before)
		var result := npc.last_result
		if not shown.contains(shown_as + ":") or result == null or not result.ok or result.line == null:
			failures.append("no answer from %s to %s (%s)" % [shown_as, step[1], result])
	await _until(func() -> bool: return _gate.size.y <= 0.5, GATE_DEADLINE_S)
	if not _demo.gate_open or _gate.size.y > 0.5:
		failures.append("the gate did not open")
	if _demo.inventory.get("lantern", 0) != 1 or not _inventory_label.text.contains("lantern"):
		failures.append("no lantern in the pack: %s" % _inventory_label.text)
	return failures


func _item_index(text: String) -> int:
	for i in _picker.item_count:
		if _picker.get_item_text(i) == text:
			return i
	return -1


func _until(condition: Callable, timeout_s: float) -> void:
	var deadline := Time.get_ticks_msec() + int(timeout_s * 1000)
	while not condition.call() and Time.get_ticks_msec() < deadline:
		await get_tree().process_frame
