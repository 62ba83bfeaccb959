extends "res://tests/check_run.gd"
## The debugger tab's parts against a real sidecar that pytest runs
## (tests/godot_addon/test_debugger.py): the game-side forwarder sends a record after an
## interaction and a package on "export"; the panel lists records, describes one, steps
## through a package, and refuses a tampered one.

const WATCHDOG_MS := 60000

var messages: Array = []


func _init() -> void:
	_run.call_deferred()


func _run() -> void:
	create_timer(WATCHDOG_MS / 1000.0).timeout.connect(
		func() -> void:
			printerr("watchdog: the debugger test ran past %d ms" % WATCHDOG_MS)
			quit(2)
	)
	var client := LoreguardClient.new()
	client.autostart = false
	root.add_child(client)
	client.start(OS.get_environment("LOREGUARD_ADDRESS"), false)
	# Not under an editor here, so the autoload made no forwarder; this one sends to a list.
	_expect(client.debug_forwarder == null, "no forwarder without a debugger session")
	client.debug_forwarder = LoreguardDebugForwarder.new(
		client, func(message: String, data: Array) -> void: messages.append([message, data])
	)
	await _test_forwarding(client)
	await _test_export(client)
	await _test_panel()
	_test_packages()
	_test_scene_package()
	_finish()


func _wait_for(count: int) -> void:
	var deadline := Time.get_ticks_msec() + 30000
	while messages.size() < count and Time.get_ticks_msec() < deadline:
		await process_frame


func _test_forwarding(client: LoreguardClient) -> void:
	var reply := await client.interact(
		{"npc_id": "guard", "trigger_reason": "player_utterance", "player_input": "Good evening, guard."}
	)
	_expect(reply.ok, "the interaction succeeds", str(reply))
	await _wait_for(1)
	_expect(messages.size() == 1, "one record forwarded after one interaction", str(messages.size()))
	if messages.is_empty():
		return
	var record: Dictionary = messages[0][1][0]
	_expect(messages[0][0] == "loreguard:record", "sent as loreguard:record", messages[0][0])
	_expect(record["receipt"]["npc_id"] == "guard", "the record is the guard's")
	_expect(record["context"]["player_input"] == "Good evening, guard.", "with the player's input")
	_expect(record["dialogue"] == reply.line.dialogue, "and the dialogue the game got")
	_expect("r%d" % record["seq"] == reply.line.audit_record_id, "the reply names the record")
	await client.interact({"npc_id": "merchant", "trigger_reason": "player_utterance", "player_input": "Lanterns?"})
	await _wait_for(2)
	_expect(
		messages.size() == 2 and client.debug_forwarder.cursor == 2, "the cursor follows the log", str(messages.size())
	)


func _test_export(client: LoreguardClient) -> void:
	var handled := client.debug_forwarder.on_editor_message("export", [10])
	_expect(handled, "the forwarder handles the editor's export message")
	await _wait_for(3)
	_expect(
		messages.size() == 3 and messages[2][0] == "loreguard:package", "a package comes back", str(messages.size())
	)
	if messages.size() < 3:
		return
	var panel := LoreguardDebuggerPanel.new()
	var path := OS.get_environment("LOREGUARD_TEST_OUT").path_join("from-godot.json")
	_expect(panel.write_package(path, messages[2][1][0]).is_empty(), "the panel saves it", path)
	_expect(messages[2][1][1] == 2, "holding both records")
	panel.free()


func _test_panel() -> void:
	var panel := LoreguardDebuggerPanel.new()
	root.add_child(panel)
	for message: Array in messages.slice(0, 2):
		panel.add_record(message[1][0])
	_expect(panel.records.size() == 2 and panel.tree.get_root().get_child_count() == 2, "two live rows")
	var cells := LoreguardDebuggerPanel.summary(panel.records[0])
	_expect(
		cells[0] == "r1" and cells[1] == "guard" and cells[2] == "Good evening, guard.",
		"row: id, NPC, input",
		str(cells)
	)
	_expect(cells[4] == "1" and cells[6] == "", "row: attempts, no fallback", str(cells))
	# One numbering: the row's id opens the detail's header and is the reply's record id.
	panel.select(0)
	_expect(
		panel.detail.get_line(0).begins_with("r1 · guard · "), "detail header: the row's id", panel.detail.get_line(0)
	)
	panel.select(1)
	_expect(panel.selected_index() == 1, "a row can be selected")
	var text := panel.detail.text
	_expect(
		text.contains("merchant") and text.contains("rules in force: ") and text.contains("--- prompt, attempt 1 ---"),
		"detail: decision, constraints, prompt",
		text.left(400)
	)
	_expect(text.contains("basic checks pass") and text.contains("secrets pass"), "detail: every gate's verdict")
	_expect(text.contains("attempt 1: passed every check"), "detail: what ended the attempt", text)
	_expect(panel.detail.wrap_mode == TextEdit.LINE_WRAPPING_BOUNDARY, "detail: long raw output wraps")
	panel.size = Vector2(900, 400)
	await process_frame
	var font := panel.tree.get_theme_font("font")
	var font_size := panel.tree.get_theme_font_size("font_size")
	for column in [1, 4]:
		var widest := (
			font.get_string_size("merchant" if column == 1 else LoreguardDebuggerPanel.COLUMNS[4], 0, -1, font_size).x
		)
		_expect(
			panel.tree.get_column_width(column) >= widest,
			"column %s fits its content" % LoreguardDebuggerPanel.COLUMNS[column],
			"%d < %d" % [panel.tree.get_column_width(column), widest]
		)
	var earlier: Dictionary = panel.records[0].duplicate(true)
	earlier["earlier_session"] = true
	panel.add_record(earlier)
	_expect(panel.tree.get_root().get_child_count() == 2, "a record of an earlier session is not listed")
	_expect(panel.status.text.contains("1 from earlier sessions hidden"), "the status says so", panel.status.text)
	panel.show_earlier.button_pressed = true
	_expect(panel.tree.get_root().get_child_count() == 3, "listed with Earlier sessions on")
	panel.queue_free()


func _test_packages() -> void:
	var panel := LoreguardDebuggerPanel.new()
	root.add_child(panel)
	var error := panel.open_package(OS.get_environment("LOREGUARD_TEST_PACKAGE"))
	_expect(error.is_empty(), "a compressed package opens", error)
	_expect(
		panel.records.size() == 6 and panel.selected_index() == 0,
		"six records, the first selected",
		str(panel.records.size())
	)
	panel.step(1)
	panel.step(1)
	_expect(panel.selected_index() == 2, "Next steps through them")
	_expect(panel.detail.text.contains("fallback: "), "r3 is the demo's fallback", panel.detail.text.left(300))
	panel.step(-5)
	_expect(panel.selected_index() == 0, "Prev stops at the first")
	var json_file := LoreguardPackageFile.read(OS.get_environment("LOREGUARD_TEST_OUT").path_join("from-godot.json"))
	_expect(
		json_file.error.is_empty() and json_file.form == "json" and json_file.records.size() == 2,
		"the saved JSON package reads back",
		json_file.error
	)
	var tampered := panel.open_package(OS.get_environment("LOREGUARD_TEST_TAMPERED"))
	_expect(tampered.contains("integrity"), "a tampered package is refused", tampered)
	_expect(panel.records.size() == 6, "and the package on show stays")
	panel.queue_free()


## A package of a scene the Python side ran (Brom, the player, Mira): each line's row says its
## scene and what its speaker heard; its detail says who heard it and ends with the
## conversation up to it.
func _test_scene_package() -> void:
	var panel := LoreguardDebuggerPanel.new()
	root.add_child(panel)
	var error := panel.open_package(OS.get_environment("LOREGUARD_TEST_SCENE_PACKAGE"))
	_expect(error.is_empty() and panel.records.size() == 2, "the scene's package opens", error)
	if panel.records.size() != 2:
		panel.queue_free()
		return
	var cells := LoreguardDebuggerPanel.summary(panel.records[1])
	_expect(
		cells[2] == "[scene gate #2] Brom: The smith is late. / Player: Is he ever on time?",
		"row: the scene, the line, what its speaker heard",
		cells[2]
	)
	panel.select(1)
	var text := panel.detail.text
	_expect(text.contains("scene gate, line 2 · heard by: Brom, the player"), "detail: who heard it", text.left(600))
	var conversation := (
		"\n"
		. join(
			[
				"--- scene gate, lines 1 to 2 ---",
				"#1 guard: The smith is late.",
				"   Player: Is he ever on time?",
				"#2 merchant: Never, Brom.",
			]
		)
	)
	_expect(text.ends_with(conversation), "detail: the conversation up to this line", text.right(300))
	panel.queue_free()
