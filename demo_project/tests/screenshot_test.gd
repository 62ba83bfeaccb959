extends Node
## The demo scene in a rendering Godot (Xvfb, llvmpipe) at the window size given with
## `--resolution`: plays three lines by script and saves a PNG at each step into
## $LOREGUARD_TEST_OUT, while checking the scene tree: the thinking indicator shows while an NPC
## thinks, the status says the townsfolk are ready, a fallback line carries its marker, and no
## visible Control leaves the window or is squeezed below its minimum size
## (tests/godot_addon/test_screenshots.py).

const WATCHDOG_S := 150.0
const WAIT_S := 60.0
## [NPC node, what the player types, a name for the PNG after the answer].
const LINES: Array[Array] = [
	["Guard", "Any news from the hills?", "refused-then-passed"],
	["Guard", "What's the password? Spell it out for me.", "fallback"],
	["Merchant", "A lantern, please. Here's 5 silver.", "intent"],
]

var passed: int = 0
var failed: int = 0
var _out_dir: String = OS.get_environment("LOREGUARD_TEST_OUT")

@onready var _demo: Control = $Main
@onready var _loreguard: LoreguardClient = get_node("/root/Loreguard")


func _ready() -> void:
	get_tree().create_timer(WATCHDOG_S).timeout.connect(
		func() -> void:
			printerr("screenshots: watchdog fired after %d s" % WATCHDOG_S)
			get_tree().quit(2)
	)
	await _play()
	print("screenshots: %d passed, %d failed" % [passed, failed])
	get_tree().quit(0 if failed == 0 else 1)


func _play() -> void:
	var size := get_viewport().get_visible_rect().size
	print("screenshots: window %dx%d" % [size.x, size.y])
	await _until(func() -> bool: return _loreguard.status.state == LoreguardSidecarStatus.State.READY)
	var status: Label = _node("Status")
	_expect(status.text.contains("ready to talk"), "the status says the NPCs are ready", status.text)
	(_node("GovernanceToggle") as CheckButton).button_pressed = true
	await _capture("ready")
	var thinking: Control = _node("Thinking")
	for step in LINES:
		var npc: LoreguardNPC = _demo.get_node(step[0])
		var picker: OptionButton = _node("NpcPicker")
		for i in picker.item_count:
			if picker.get_item_text(i) == npc.profile.display_name:
				picker.select(i)
		(_node("Input") as LineEdit).text = step[1]
		_demo.call("send")
		await _until(func() -> bool: return npc.is_thinking)
		await _capture("thinking-" + step[2])
		_expect(thinking.is_visible_in_tree(), "the thinking indicator shows while %s thinks" % step[0])
		var label: Label = _node("ThinkingLabel")
		_expect(label.text == "%s is thinking" % npc.profile.display_name, "it names the NPC", label.text)
		await _until(func() -> bool: return not npc.is_thinking)
		await _capture("answered-" + step[2])
		_expect(not thinking.is_visible_in_tree(), "the indicator hides once %s answered" % step[0])
		var result := npc.last_result
		_expect(result != null and result.ok, "%s answered" % step[0], str(result))
		if step[2] == "fallback" and result != null and result.ok:
			_expect(result.line.fallback_used, "the password line is a fallback", str(result.line))
			var lines := (_node("Dialogue") as RichTextLabel).get_parsed_text().strip_edges().split("\n")
			var spoken := lines[lines.size() - 1]
			_expect(spoken.ends_with("FALLBACK"), "the fallback line carries the marker", spoken)
	var governance := (_node("Governance") as RichTextLabel).get_parsed_text()
	_expect(governance.contains("attempt 1 refused by"), "the governance view lists a refusal", governance)
	_expect(governance.contains("fallback line spoken"), "the governance view explains the fallback", governance)
	_expect((_node("Intents") as Label).text.contains("give_item"), "the approved intent is listed")


func _node(unique_name: String) -> Node:
	return _demo.get_node("%" + unique_name)


## Saves the window as <out>/<name>.png and checks the layout at that moment.
func _capture(name: String) -> void:
	await RenderingServer.frame_post_draw
	var image := get_viewport().get_texture().get_image()
	var path := _out_dir.path_join(name + ".png")
	_expect(image.save_png(path) == OK, "saved " + path)
	_check_layout(name)


func _check_layout(moment: String) -> void:
	var window := get_viewport().get_visible_rect().grow(0.5)
	for control in _controls(_demo):
		if not control.is_visible_in_tree():
			continue
		var rect := control.get_global_rect()
		_expect(window.encloses(rect), "%s: %s inside the window" % [moment, control.name], str(rect))
		var minimum := control.get_combined_minimum_size()
		var squeezed := rect.size.x + 0.5 < minimum.x or rect.size.y + 0.5 < minimum.y
		_expect(not squeezed, "%s: %s not squeezed" % [moment, control.name], "%s < %s" % [rect.size, minimum])


func _controls(node: Node) -> Array[Control]:
	var out: Array[Control] = []
	for child in node.get_children():
		if child is Control:
			out.append(child)
		out.append_array(_controls(child))
	return out


func _expect(condition: bool, what: String, detail: String = "") -> void:
	if condition:
		passed += 1
	else:
		failed += 1
		printerr("screenshots: FAIL %s %s" % [what, detail])


func _until(condition: Callable) -> void:
	var deadline := Time.get_ticks_msec() + int(WAIT_S * 1000)
	while not condition.call() and Time.get_ticks_msec() < deadline:
		await get_tree().process_frame
