extends "res://tests/check_run.gd"
## LoreguardTypewriter (tests/godot_addon/test_typewriter.py): with its defaults no text waits on
## it more than `max_lag_s` after it arrived, also a streamed line; a click on the label, the skip
## action or (when on) any key shows the rest at once; a speed of 0 or less set from a script
## shows text at once and never hangs; the inspector cannot set a speed of 0.

const WATCHDOG_S := 60.0
## A 60 fps frame, the step of the deterministic checks.
const FRAME_S := 1.0 / 60.0
const LONG_LINE := (
	"Aye, traveller, the north gate stays shut after dark; the captain's orders, and mine. Come back at"
	+ " dawn with a writ from the reeve, or a better story than the last one, and we will talk again."
)

var _label: RichTextLabel


func _init() -> void:
	_run.call_deferred()


func _run() -> void:
	create_timer(WATCHDOG_S).timeout.connect(
		func() -> void:
			printerr("watchdog: the typewriter test ran past %d s" % WATCHDOG_S)
			quit(2)
	)
	_label = RichTextLabel.new()
	_label.position = Vector2(10, 10)
	_label.size = Vector2(400, 200)
	root.add_child(_label)
	_test_inspector_range()
	_test_whole_line_within_max_lag()
	_test_streamed_line_never_lags()
	_test_zero_or_negative_speed_is_instant()
	await _test_real_frames_keep_the_lag()
	await _test_skips()
	_finish()


func _typewriter() -> LoreguardTypewriter:
	_label.clear()
	_label.visible_characters = -1
	var typewriter := LoreguardTypewriter.new()
	typewriter.label = _label
	typewriter.set_process(false)  # the deterministic checks step it themselves
	root.add_child(typewriter)
	return typewriter


## Steps `typewriter` a frame at a time until it shows everything; the seconds that took.
func _seconds_to_finish(typewriter: LoreguardTypewriter) -> float:
	var seconds := 0.0
	while typewriter.is_typing() and seconds < 30.0:
		typewriter.advance(FRAME_S)
		seconds += FRAME_S
	return seconds


func _test_inspector_range() -> void:
	var typewriter := LoreguardTypewriter.new()
	for property in typewriter.get_property_list():
		if property["name"] == "chars_per_second":
			_expect(property["hint"] == PROPERTY_HINT_RANGE, "chars_per_second is a range in the inspector")
			var low := float(str(property["hint_string"]).get_slice(",", 0))
			_expect(low > 0.0, "its lowest inspector value is above 0", str(property["hint_string"]))
	_expect(typewriter.max_lag_s <= 0.5, "the default lag is at most 0.5 s", str(typewriter.max_lag_s))
	typewriter.free()


func _test_whole_line_within_max_lag() -> void:
	# A whole line at once (a reply that did not stream): at 45 chars/s it would take 4.3 s.
	var typewriter := _typewriter()
	typewriter.type_text(LONG_LINE)
	_expect(typewriter.is_typing(), "a line is typed, not shown at once")
	typewriter.advance(FRAME_S)
	var first := _label.visible_characters
	_expect(first > 0 and first < LONG_LINE.length(), "it starts typing", str(first))
	var seconds := _seconds_to_finish(typewriter) + FRAME_S
	_expect(seconds <= 0.5 + FRAME_S, "a whole line is shown within 0.5 s of arriving", "%.3f s" % seconds)
	_expect(_label.visible_characters == -1 and not typewriter.is_typing(), "then everything is visible")
	typewriter.free()


func _test_streamed_line_never_lags() -> void:
	# Sentences arrive every 0.3 s; each must be on screen within 0.5 s of its arrival.
	var typewriter := _typewriter()
	var sentences := LONG_LINE.split("; ")
	var arrived := PackedFloat64Array()
	var ends := PackedInt64Array()
	var clock := 0.0
	var worst := 0.0
	var next := 0
	var shown_at := {}
	while (next < sentences.size() or typewriter.is_typing()) and clock < 30.0:
		if next < sentences.size() and clock >= next * 0.3:
			typewriter.type_text(sentences[next] + " ")
			arrived.append(clock)
			ends.append(_label.get_total_character_count())
			next += 1
		typewriter.advance(FRAME_S)
		clock += FRAME_S
		var visible := _label.visible_characters if _label.visible_characters >= 0 else 1 << 30
		for i in ends.size():
			if not shown_at.has(i) and visible >= ends[i]:
				shown_at[i] = clock
				worst = maxf(worst, clock - arrived[i])
	_expect(shown_at.size() == sentences.size(), "every sentence was shown", str(shown_at))
	_expect(worst <= 0.5 + FRAME_S, "no sentence waited more than 0.5 s", "%.3f s" % worst)
	typewriter.free()


func _test_zero_or_negative_speed_is_instant() -> void:
	for speed: float in [0.0, -10.0]:
		var typewriter := _typewriter()
		typewriter.chars_per_second = speed
		typewriter.type_text(LONG_LINE)
		_expect(not typewriter.is_typing() and _label.visible_characters == -1, "speed %s shows text at once" % speed)
		typewriter.free()
	# Set to 0 while a line is typing: the next frame shows the rest.
	var typing := _typewriter()
	typing.type_text(LONG_LINE)
	typing.advance(FRAME_S)
	typing.chars_per_second = 0.0
	typing.advance(FRAME_S)
	_expect(not typing.is_typing(), "speed 0 set mid-line shows the rest on the next frame")
	typing.free()
	var no_lag := _typewriter()
	no_lag.max_lag_s = 0.0
	no_lag.type_text(LONG_LINE)
	_expect(not no_lag.is_typing(), "max_lag_s 0 shows text at once")
	no_lag.free()


func _test_real_frames_keep_the_lag() -> void:
	# The same with the engine's own frames: done by the first frame after 0.5 s of frames.
	var typewriter := _typewriter()
	typewriter.set_process(true)
	typewriter.type_text(LONG_LINE)
	var frames := 0.0
	var longest := 0.0
	while typewriter.is_typing() and frames < 30.0:
		await process_frame  # before this frame's _process: `frames` runs one frame ahead
		frames += _label.get_process_delta_time()
		longest = maxf(longest, _label.get_process_delta_time())
	_expect(not typewriter.is_typing(), "real frames finish the line")
	_expect(frames <= 0.5 + 2 * longest + 0.001, "within 0.5 s of frame time", "%.3f s" % frames)
	typewriter.free()


func _test_skips() -> void:
	var click := _typewriter()
	click.type_text(LONG_LINE)
	root.push_input(_mouse_click(Vector2(600, 400)))
	_expect(click.is_typing(), "a click beside the label does not skip")
	root.push_input(_mouse_click(_label.get_global_rect().get_center()))
	_expect(not click.is_typing() and _label.visible_characters == -1, "a click on the label shows all")
	click.free()

	var action := _typewriter()
	action.type_text(LONG_LINE)
	var letter := _key(KEY_A)
	root.push_input(letter)
	_expect(action.is_typing(), "a letter key does not skip by default")
	var accept := InputEventAction.new()
	accept.action = &"ui_accept"
	accept.pressed = true
	root.push_input(accept)
	_expect(not action.is_typing() and _label.visible_characters == -1, "ui_accept shows all")
	action.free()

	var any_key := _typewriter()
	any_key.skip_on_any_key = true
	any_key.type_text(LONG_LINE)
	root.push_input(_key(KEY_A))
	_expect(not any_key.is_typing(), "with skip_on_any_key, any key shows all")
	any_key.type_text(" And one more thing.")
	_expect(any_key.is_typing(), "text after a skip is typed again")
	any_key.finish()
	any_key.free()
	await process_frame


func _mouse_click(at: Vector2) -> InputEventMouseButton:
	var click := InputEventMouseButton.new()
	click.button_index = MOUSE_BUTTON_LEFT
	click.pressed = true
	click.position = at
	click.global_position = at
	return click


func _key(code: Key) -> InputEventKey:
	var key := InputEventKey.new()
	key.keycode = code
	key.pressed = true
	return key
