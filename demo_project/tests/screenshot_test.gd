extends Node
## The demo scene in a rendering Godot (Xvfb, llvmpipe) at the window size given with
## `--resolution`: plays four lines of a governance-heavy scripted session by script and saves a
## PNG at each step into $LOREGUARD_TEST_OUT, while checking the scene tree: the thinking
## indicator shows while an NPC thinks, the status says the townsfolk are ready, a fallback line
## carries its marker, the governance view says in plain words what refused each attempt, folds
## and unfolds what a refused attempt said and links each entry to its line; then the editor's
## Loreguard tab (LoreguardDebuggerPanel) over the window with the session's audit records; then
## the player stands by the gate, Brom and Mira talk to each other, and the player walks away. At
## every capture no visible Control leaves the window or is squeezed below its minimum size, and
## no text is cut: each label, cell and title fits its width or wraps with every line shown
## (tests/godot_addon/test_screenshots.py).

const WATCHDOG_S := 210.0
const WAIT_S := 60.0
## [NPC node, what the player types, a name for the PNG after the answer]: GOVERNANCE_LINES in
## tests/godot_helpers.py, whose script the sidecar plays.
const LINES: Array[Array] = [
	["Guard", "Any news from the hills?", "refused-then-passed"],
	["Guard", "What's the password? Spell it out for me.", "fallback"],
	["Merchant", "I'd like a lantern, please. Here's 5 silver.", "intent"],
	["Merchant", "Could I have some bread for free?", "every-attempt-refused"],
	["Merchant", "Sell me two lanterns.", "no-sale"],
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
	await _governance_view()
	await _editor_tab()
	await _scene_at_gate()
	print("screenshots: %d passed, %d failed" % [passed, failed])
	get_tree().quit(0 if failed == 0 else 1)


func _play() -> void:
	var size := get_viewport().get_visible_rect().size
	print("screenshots: window %dx%d" % [size.x, size.y])
	await _until(func() -> bool: return _loreguard.status.state == LoreguardSidecarStatus.State.READY)
	var status: Label = _node("Status")
	var npcs: Array[LoreguardNPC] = [_demo.get_node("Guard"), _demo.get_node("Merchant")]
	if not npcs.all(func(npc: LoreguardNPC) -> bool: return npc.is_warm):
		_expect(status.text.contains("getting ready"), "the status says getting ready while they warm up", status.text)
	await _until(func() -> bool: return npcs.all(func(npc: LoreguardNPC) -> bool: return npc.is_warm))
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
			_expect(spoken.begins_with("#2 Brom:"), "the line carries its number", spoken)
	_expect((_node("Intents") as Label).text.contains("give_item"), "the approved intent is listed")
	_expect_deals()


## The purse and the sale the rules made or refused: the lantern took its 5 silver, and two more
## (10 silver, with 7 left) were refused with the reason shown.
func _expect_deals() -> void:
	var purse := (_node("Purse") as Label).text
	_expect(purse == "Your purse: 7 silver", "the lantern's 5 silver left the purse of 12", purse)
	_expect((_node("Intents") as Label).text.contains("for 5 silver"), "the sale shows its price")
	var said := (_node("Dialogue") as RichTextLabel).get_parsed_text()
	var why := "no sale: the player has 7 silver, and 2 lanterns cost 10 silver"
	_expect(said.contains(why), "a declined sale says why", said)


## The governance view once every line is typed: plain words with the rule ids, one entry per
## attempt, the refused text folded until clicked, and each entry's number scrolling to its line.
func _governance_view() -> void:
	var dialogue: RichTextLabel = _node("Dialogue")
	await _until(func() -> bool: return dialogue.visible_characters < 0)
	var governance: LoreguardGovernanceLog = _node("Governance")
	var text := governance.get_parsed_text()
	_expect(governance.entry_count() == LINES.size(), "one governance entry per line", str(governance.entry_count()))
	for words in [
		"#1 Brom · its own line passed on attempt 2",
		"attempt 1: stopped mid-line by the designer's rules, before anything was shown",
		"said a forbidden word: dragon [no_dragon]",
		"attempt 2: passed every check",
		"gave away a secret [password]",
		"a critical rule was broken, so it was not tried again; used Brom's authored line for a player's question",
		"approved action: give_item(count=1, item=lantern)",
		"said a forbidden word: free of charge [no_free_goods]",
		"was only stage directions or markup, no speech [empty_after_hygiene]",
		"every attempt was refused; used the line authored for what the rules decided [deal_lines]",
		"decided by the rules: sold (sells 1 lantern for 5 silver)",
		"decided by the rules: no sale (the player has 7 silver, and 2 lanterns cost 10 silver)",
	]:
		_expect(text.contains(words), "the governance view says: " + words, text)
	for jargon in ["hard_limits", "attempts_exhausted", " -> ", "parse failed"]:
		_expect(not text.contains(jargon), "no jargon in the governance view: " + jargon, text)
	_expect(not text.contains("They say a dragon"), "what a refused attempt said starts folded")
	governance.scroll_to_entry(1)
	governance.meta_clicked.emit("said:1:1")
	await _capture("governance-unfolded")
	text = governance.get_parsed_text()
	_expect(text.contains("“They say a dragon was seen in the hills.”"), "a click unfolds what it said", text)
	_expect(governance.is_refused_text_shown(1, 1), "and the view knows it is unfolded")
	# The entry's number scrolls the dialogue to its line (as far as the dialogue scrolls).
	governance.meta_clicked.emit("line:1")
	var bar := dialogue.get_v_scroll_bar()
	var paragraph := _paragraph_starting(dialogue, "#1 Brom:")
	var want := minf(dialogue.get_paragraph_offset(paragraph), bar.max_value - bar.page)
	_expect(
		paragraph >= 0 and absf(bar.value - maxf(want, 0.0)) < 1.0, "#1 scrolls to line 1", "%s %s" % [bar.value, want]
	)
	governance.meta_clicked.emit("said:1:1")
	_expect(not governance.is_refused_text_shown(1, 1), "a second click folds it again")


## The editor's Loreguard tab over the window, fed this session's audit records as the game's
## forwarder would, with the fallback interaction selected.
func _editor_tab() -> void:
	var tail := await _loreguard.audit_tail("", 20)
	_expect(tail.ok, "the session's audit records", str(tail))
	var records: Array = tail.body.get("records", []) if tail.ok else []
	var layer := CanvasLayer.new()
	add_child(layer)
	# Opaque, as the editor's dock is: the game must not show through.
	var backdrop := ColorRect.new()
	backdrop.color = Color(0.13, 0.15, 0.18)
	backdrop.set_anchors_preset(Control.PRESET_FULL_RECT)
	layer.add_child(backdrop)
	var panel := LoreguardDebuggerPanel.new()
	panel.set_anchors_preset(Control.PRESET_FULL_RECT)
	backdrop.add_child(panel)
	for record: Dictionary in records:
		panel.add_record(record)
	_expect(panel.tree.get_root().get_child_count() == LINES.size(), "one row per interaction", str(records.size()))
	var fallback := -1
	for i in records.size():
		if records[i]["receipt"]["outcome"] == "fallback" and fallback < 0:
			fallback = i
	panel.select(fallback)
	await _capture("editor-tab", backdrop)
	if fallback < 0:
		_expect(false, "a fallback record to select")
		return
	var row := panel.tree.get_selected()
	var header := panel.detail.get_line(0)
	_expect(
		header.begins_with(row.get_text(0) + " · "),
		"the row id is the detail's",
		"%s / %s" % [row.get_text(0), header]
	)
	_expect(row.get_text(5) == "secrets [password]", "the row says what refused it", row.get_text(5))
	var detail := panel.detail.text
	for words in [
		"attempt 1: stopped mid-line by the secrets check, before anything was shown",
		"• gave away a secret [password]",
		"fallback: a critical rule was broken, so it was not tried again; used guard's authored line for",
		"read: not parsed whole (the generation was cut)",
	]:
		_expect(detail.contains(words), "the detail says: " + words, detail.left(1200))
	_expect(not detail.contains("parse failed") and not detail.contains("read: failed"), "no parse failure on a cut")
	panel.select(0)
	var first := panel.detail.get_line(0)
	_expect(first.contains("its own line passed on attempt 2"), "the first record passed on attempt 2", first)
	await _capture("editor-tab-first", backdrop)
	layer.queue_free()


## Standing by the gate: Brom and Mira talk to each other (the demo's LoreguardScene), their
## lines numbered in the dialogue like any other; walking away ends the scene.
func _scene_at_gate() -> void:
	var talk: LoreguardScene = _demo.get_node("GateTalk")
	var spoken: Array[String] = []
	talk.line_spoken.connect(func(npc: LoreguardNPC, _line: LoreguardLine) -> void: spoken.append(npc.profile.id))
	var pressed_ms := Time.get_ticks_msec()
	(_node("NearGate") as CheckButton).button_pressed = true
	await _until(func() -> bool: return spoken.size() >= 2)
	var since_ms := Time.get_ticks_msec() - pressed_ms
	var governance: LoreguardGovernanceLog = _node("Governance")
	var scene_lines := governance.entries().filter(
		func(e: Dictionary) -> bool: return e["trigger"] == "npc_interaction"
	)
	_expect(
		scene_lines.size() >= 2 and scene_lines.all(func(e: Dictionary) -> bool: return e["latency_ms"] <= since_ms),
		"a scene line's time counts from when the scene asked for it, not from the player's last words",
		str(scene_lines.map(func(e: Dictionary) -> int: return e["latency_ms"])) + " <= %d ms" % since_ms
	)
	var dialogue: RichTextLabel = _node("Dialogue")
	await _until(func() -> bool: return dialogue.visible_characters < 0)
	var text := dialogue.get_parsed_text()
	_expect(
		text.contains("Brom and Mira are talking at the gate."), "the scene opens in the dialogue", text.right(400)
	)
	_expect(spoken.slice(0, 2) == ["guard", "merchant"], "Brom opens, Mira answers", str(spoken))
	var first := LINES.size() + 1
	_expect(
		(
			_paragraph_starting(dialogue, "#%d Brom:" % first) >= 0
			and _paragraph_starting(dialogue, "#%d Mira:" % (first + 1)) >= 0
		),
		"their lines are numbered on from the player's",
		text.right(400)
	)
	await _capture("scene-at-gate")
	# The player walks away while the next line is being thought.
	var npcs: Array[LoreguardNPC] = [_demo.get_node("Guard"), _demo.get_node("Merchant")]
	await _until(func() -> bool: return npcs.any(func(npc: LoreguardNPC) -> bool: return npc.is_thinking))
	var speaker: LoreguardNPC = npcs.filter(func(npc: LoreguardNPC) -> bool: return npc.is_thinking).front()
	(_node("NearGate") as CheckButton).button_pressed = false
	await _until(func() -> bool: return not talk.is_running)
	await _until(func() -> bool: return dialogue.get_parsed_text().contains("You walk away from the gate."))
	_expect(dialogue.get_parsed_text().contains("You walk away from the gate."), "walking away ends it")
	_expect(not (_node("NearGate") as CheckButton).button_pressed, "and the toggle is off")
	_expect(not (_node("Thinking") as Control).is_visible_in_tree(), "and no one is left thinking")
	# The one who was thinking answers the player next: by then the line it was thinking for the
	# scene has come back from the sidecar, and it must not have been shown.
	var picker: OptionButton = _node("NpcPicker")
	for i in picker.item_count:
		if picker.get_item_text(i) == speaker.profile.display_name:
			picker.select(i)
	(_node("Input") as LineEdit).text = "Are you still there?"
	var answered: Array[bool] = []
	speaker.replied.connect(func(_line: LoreguardLine) -> void: answered.append(true), CONNECT_ONE_SHOT)
	_demo.call("send")
	await _until(func() -> bool: return not answered.is_empty())
	await _until(func() -> bool: return dialogue.visible_characters < 0)
	var after := dialogue.get_parsed_text().split("You walk away from the gate.")[-1]
	var spoken_after := Array(after.split("\n")).filter(func(line: String) -> bool: return line.begins_with("#"))
	_expect(
		spoken_after.size() == 1 and spoken_after[0].contains(speaker.profile.display_name + ":"),
		"after walking away only the player's own answer is heard, not the scene's dropped line",
		after
	)
	await _capture("walked-away")


func _node(unique_name: String) -> Node:
	return _demo.get_node("%" + unique_name)


## The paragraph of `label` whose text starts with `start`, or -1.
func _paragraph_starting(label: RichTextLabel, start: String) -> int:
	var lines := label.get_parsed_text().split("\n")
	for i in lines.size():
		if lines[i].begins_with(start):
			return i
	return -1


## Saves the window as <out>/<name>.png and checks the layout of `root` (the demo by default).
func _capture(name: String, root: Control = null) -> void:
	await RenderingServer.frame_post_draw
	var image := get_viewport().get_texture().get_image()
	var path := _out_dir.path_join(name + ".png")
	_expect(image.save_png(path) == OK, "saved " + path)
	_check_layout(name, root if root != null else _demo)
	for tree in _controls(root if root != null else _demo).filter(func(c: Control) -> bool: return c is Tree):
		await _check_tree_fits("%s: %s" % [name, tree.name], tree)


func _check_layout(moment: String, root: Control) -> void:
	var window := get_viewport().get_visible_rect().grow(0.5)
	for control in _controls(root):
		if not control.is_visible_in_tree():
			continue
		var rect := control.get_global_rect()
		_expect(window.encloses(rect), "%s: %s inside the window" % [moment, control.name], str(rect))
		var minimum := control.get_combined_minimum_size()
		var squeezed := rect.size.x + 0.5 < minimum.x or rect.size.y + 0.5 < minimum.y
		_expect(not squeezed, "%s: %s not squeezed" % [moment, control.name], "%s < %s" % [rect.size, minimum])
		_check_text_fits("%s: %s" % [moment, control.name], control)


## Text a control cuts off: a label's text wider than it (or wrapped to more lines than show), a
## rich text's content wider than it, a placeholder wider than its box (trees: _check_tree_fits).
func _check_text_fits(what: String, control: Control) -> void:
	if control is Label:
		var label := control as Label
		if label.autowrap_mode == TextServer.AUTOWRAP_OFF:
			var width := _text_width(label.text, label.get_theme_font("font"), label.get_theme_font_size("font_size"))
			_expect(
				width <= label.size.x + 0.5, what + " text fits", "%s: %d > %d" % [label.text, width, label.size.x]
			)
		else:
			var shown := label.get_visible_line_count()
			_expect(label.get_line_count() <= shown, what + " shows every wrapped line", label.text)
	elif control is RichTextLabel:
		var rich := control as RichTextLabel
		_expect(rich.get_content_width() <= rich.size.x + 0.5, what + " content wraps inside it")
	elif control is LineEdit:
		var edit := control as LineEdit
		var font := edit.get_theme_font("font")
		var width := _text_width(edit.placeholder_text, font, edit.get_theme_font_size("font_size"))
		_expect(width <= edit.size.x, what + " placeholder fits", "%d > %d" % [width, edit.size.x])


## A tree cuts text off when a cell's or title's text is wider than its column (or wraps taller
## than its row), or its columns are wider than it. Each row is scrolled into view first: a tree
## sizes a wrapped row when it draws it.
func _check_tree_fits(what: String, tree: Tree) -> void:
	var font := tree.get_theme_font("font")
	var font_size := tree.get_theme_font_size("font_size")
	var margins := (
		tree.get_theme_constant("inner_item_margin_left") + tree.get_theme_constant("inner_item_margin_right")
	)
	var columns := 0
	for column in tree.columns:
		columns += tree.get_column_width(column)
		var title := tree.get_column_title(column)
		var title_width := _text_width(
			title, tree.get_theme_font("title_button_font"), tree.get_theme_font_size("title_button_font_size")
		)
		_expect(title_width <= tree.get_column_width(column), "%s title %s fits" % [what, title])
	_expect(
		columns <= tree.size.x, what + " columns fit without sideways scrolling", "%d > %d" % [columns, tree.size.x]
	)
	var item := tree.get_root().get_first_child() if tree.get_root() != null else null
	while item != null:
		tree.scroll_to_item(item)
		await RenderingServer.frame_post_draw
		for column in tree.columns:
			var text := item.get_text(column)
			var rect := tree.get_item_area_rect(item, column)
			var room := rect.size.x - margins
			if text.is_empty():
				continue
			if item.get_autowrap_mode(column) == TextServer.AUTOWRAP_OFF:
				var width := _text_width(text, font, font_size)
				_expect(width <= room + 0.5, "%s cell fits: %s" % [what, text], "%d > %d" % [width, room])
			else:
				var flags := TextServer.BREAK_MANDATORY | TextServer.BREAK_WORD_BOUND | TextServer.BREAK_ADAPTIVE
				var height := (
					font.get_multiline_string_size(text, HORIZONTAL_ALIGNMENT_LEFT, room, font_size, -1, flags).y
				)
				_expect(height <= rect.size.y + 0.5, "%s cell wraps within its row: %s" % [what, text], str(rect))
		item = item.get_next()


func _text_width(text: String, font: Font, font_size: int) -> float:
	return font.get_string_size(text, HORIZONTAL_ALIGNMENT_LEFT, -1, font_size).x


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
