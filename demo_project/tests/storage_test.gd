extends Node
## The demo when its save cannot be written: pytest makes the sidecar's writes fail (touching
## `fail-please`, it answers `failing`), the player says two lines, then pytest gives room back
## (`room-please` → `room`) and the player says one more. The demo must say "could not save"
## once, not per line, show no half line, and say once that it can save again
## (tests/godot_addon/test_storage.py reads the `storage:` lines printed here).

const Demo := preload("res://main.gd")
const WATCHDOG_S := 120.0

var _out_dir: String = OS.get_environment("LOREGUARD_TEST_OUT")
var _signals: PackedStringArray = []

@onready var _demo: Demo = $Main
@onready var _input: LineEdit = $Main.get_node("%Input")
@onready var _picker: OptionButton = $Main.get_node("%NpcPicker")
@onready var _dialogue: RichTextLabel = $Main.get_node("%Dialogue")
@onready var _loreguard: LoreguardClient = get_node("/root/Loreguard")


func _ready() -> void:
	get_tree().create_timer(WATCHDOG_S).timeout.connect(func() -> void: get_tree().quit(2))
	_loreguard.storage_failed.connect(func(reason: String) -> void: _signals.append("failed: " + reason))
	_loreguard.storage_recovered.connect(func() -> void: _signals.append("recovered"))
	if not _loreguard.is_connected_to_sidecar():
		await _loreguard.connected
	_picker.select(0)  # Brom
	print("storage: before: ", await _say("Good evening."))
	await _ask_pytest("fail-please", "failing")
	print("storage: failing 1: ", await _say("Is the road north safe?"))
	print("storage: failing 2: ", await _say("And the road south?"))
	print("storage: storage_failing: ", _loreguard.storage_failing)
	await _ask_pytest("room-please", "room")
	print("storage: after: ", await _say("Thank you, guard."))
	print("storage: storage_failing after: ", _loreguard.storage_failing)
	print("storage: signals: ", " | ".join(_signals))
	print("storage: dialogue: ", _dialogue.get_parsed_text().strip_edges().replace("\n", " | "))
	get_tree().quit(0)


## What became of the line: "ok" or the error code.
func _say(text: String) -> String:
	_input.text = text
	await _demo.send()
	var result: LoreguardResult = _demo.get_node("Guard").last_result
	return "ok" if result != null and result.ok else (result.error.code if result != null else "no result")


func _ask_pytest(request: String, answer: String) -> void:
	FileAccess.open(_out_dir.path_join(request), FileAccess.WRITE).store_string("1")
	while not FileAccess.file_exists(_out_dir.path_join(answer)):
		await get_tree().process_frame
