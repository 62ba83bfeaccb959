extends Node
## A launch command that cannot start (not found, not executable, or a sidecar that exits before
## it ever answered): the demo's status goes to `failed` at once with one line naming the command
## and the fix, the launcher never restarts it, and a line said after that fails at once with
## `sidecar_down` (tests/godot_addon/test_supervision.py reads the lines printed here).

const WATCHDOG_S := 150.0

## Every status the autoload reported, as "state: reason".
var _statuses: PackedStringArray = []
var _problems: PackedStringArray = []

@onready var _loreguard: LoreguardClient = get_node("/root/Loreguard")
@onready var _guard: LoreguardNPC = $Main/Guard
@onready var _status_label: Label = $Main.get_node("%Status")
@onready var _dialogue: RichTextLabel = $Main.get_node("%Dialogue")


func _ready() -> void:
	get_tree().create_timer(WATCHDOG_S).timeout.connect(func() -> void: get_tree().quit(2))
	_loreguard.status_changed.connect(
		func(s: LoreguardSidecarStatus) -> void: _statuses.append("%s: %s" % [s.state_name(), s.reason])
	)
	_loreguard.sidecar_problem.connect(func(message: String) -> void: _problems.append(message))
	while _loreguard.status.state != LoreguardSidecarStatus.State.FAILED:
		await get_tree().process_frame
	var failed := _loreguard.status.reason
	var started := Time.get_ticks_msec()
	var result := await _guard.say("Hello?")
	var code := result.error.code if not result.ok else "ok"
	var waited_ms := Time.get_ticks_msec() - started
	# Nothing is due after FAILED: the status, the problems and the process stay as they are.
	for status in _statuses:
		print("launch_failure: status ", status)
	print("launch_failure: restarts: ", _count("restarting: "))
	# Distinct ones: a loading status is repeated each second with the seconds count.
	print("launch_failure: launches: ", _count("loading_model: launched", true))
	print("launch_failure: failed statuses: ", _count("failed: "))
	print("launch_failure: problems: ", _problems.size())
	print("launch_failure: failed: ", failed)
	print("launch_failure: problem is the status: ", _problems.size() == 1 and _problems[0] == failed)
	print("launch_failure: sidecar running: ", _loreguard.launched_pid > 0)
	print("launch_failure: label: ", _status_label.text)
	print("launch_failure: a line after that: %s after %d ms" % [code, waited_ms])
	# Standing by the gate: Brom and Mira's talk cannot start either, and says so at once.
	var near: CheckButton = $Main.get_node("%NearGate")
	started = Time.get_ticks_msec()
	near.button_pressed = true
	var talk: LoreguardScene = $Main/GateTalk
	var begun := await talk.begin()
	print(
		(
			"launch_failure: the scene: %s after %d ms"
			% [begun.error.code if not begun.ok else "ok", Time.get_ticks_msec() - started]
		)
	)
	print("launch_failure: the toggle after that: ", near.button_pressed)
	print("launch_failure: tooltip: ", _status_label.tooltip_text.left(40))
	print("launch_failure: dialogue: ", _dialogue.get_parsed_text().strip_edges().replace("\n", " | "))
	get_tree().quit(0)


func _count(prefix: String, distinct: bool = false) -> int:
	var seen := {}
	var n := 0
	for status in _statuses:
		if status.begins_with(prefix) and not (distinct and seen.has(status)):
			seen[status] = true
			n += 1
	return n
