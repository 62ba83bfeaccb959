@tool
@icon("../icon.svg")
class_name LoreguardDebuggerPanel
extends VBoxContainer
## The "Loreguard" tab of the editor's debugger: the running game's interactions as they
## happen (record id, NPC, what the player and the NPC said, attempts, what refused them,
## fallback, latency), long text wrapped in its column. Selecting one shows, in plain words
## with each rule's id in brackets (LoreguardGovernanceText), what ended each attempt and why,
## what it said, every gate's verdict, the constraints and the prompts. "Export debug package" asks the game for
## a package of the newest records; "Open package…" loads one and Prev/Next step through it.
## Records the sidecar kept from earlier game sessions are hidden unless "Earlier sessions" is on.

## The "Export debug package" button: ask the game for its newest `last` records.
signal export_requested(last: int)

const COLUMNS: PackedStringArray = [
	"Record", "NPC", "Player said", "NPC said", "Tries", "Refused by", "Fallback", "ms"
]
## The columns that share the spare width, wrapping their text, and their shares of it; the
## others are as wide as their widest cell.
const EXPANDING := {2: 2, 3: 3, 5: 2}
## A wrapping column is never narrower than this per share of the spare width: text wrapped a
## word a line is as unreadable as text cut short, and the spare width alone is small in a
## narrow dock.
const MIN_WIDTH_PER_SHARE := 40
## Room kept for the list's vertical scrollbar.
const SCROLLBAR_ROOM := 16
## Room around a cell's text (the tree's inner margins, 10, and a gap).
const CELL_PADDING := 20
## Narrower than this, the detail goes under the list instead of beside it.
const SIDE_BY_SIDE_WIDTH := 1100
const MAX_LIVE := 500
const EXPORT_LAST := 50

## The records on show: the live ones, or an opened package's.
var records: Array = []
## "live", or the path of the package on show.
var source: String = "live"
var tree: Tree
var detail: TextEdit
var status: Label
## Off: records of earlier game sessions (before this game connected) are not listed.
var show_earlier: CheckBox

var _live: Array = []
## The list and the detail: side by side, or one over the other when the tab is narrow.
var _split: SplitContainer
var _dialog: FileDialog
var _package_text: String = ""


func _init() -> void:
	name = "Loreguard"
	# A flow, not a row: in a narrow dock the buttons go on to a second line instead of
	# pushing the status off the edge.
	var bar := HFlowContainer.new()
	add_child(bar)
	_button(bar, "Export debug package", func() -> void: export_requested.emit(EXPORT_LAST))
	_button(bar, "Open package…", _choose_package)
	_button(bar, "◀ Prev", func() -> void: step(-1))
	_button(bar, "Next ▶", func() -> void: step(1))
	_button(bar, "Live", show_live)
	_button(bar, "Clear", clear)
	show_earlier = CheckBox.new()
	show_earlier.text = "Earlier sessions"
	show_earlier.tooltip_text = "Also list records the sidecar kept from earlier runs of the game."
	show_earlier.toggled.connect(func(_on: bool) -> void: _rebuild())
	bar.add_child(show_earlier)
	status = Label.new()
	status.size_flags_horizontal = Control.SIZE_EXPAND_FILL
	status.size_flags_vertical = Control.SIZE_SHRINK_CENTER
	bar.add_child(status)
	_split = SplitContainer.new()
	_split.size_flags_vertical = Control.SIZE_EXPAND_FILL
	add_child(_split)
	tree = Tree.new()
	tree.columns = COLUMNS.size()
	tree.column_titles_visible = true
	tree.hide_root = true
	tree.select_mode = Tree.SELECT_ROW
	tree.size_flags_horizontal = Control.SIZE_EXPAND_FILL
	tree.size_flags_vertical = Control.SIZE_EXPAND_FILL
	tree.size_flags_stretch_ratio = 1.8
	# A flat list: no indent before the first column; a little air inside every cell.
	tree.add_theme_constant_override("item_margin", 0)
	tree.add_theme_constant_override("inner_item_margin_left", 4)
	tree.add_theme_constant_override("inner_item_margin_right", 6)
	for i in COLUMNS.size():
		tree.set_column_title(i, COLUMNS[i])
		tree.set_column_expand(i, EXPANDING.has(i))
		tree.set_column_expand_ratio(i, EXPANDING.get(i, 1))
		# Fixed columns are sized to their text, wrapping ones wrap it: neither needs clipping.
		tree.set_column_clip_content(i, false)
	tree.set_column_title_alignment(COLUMNS.size() - 1, HORIZONTAL_ALIGNMENT_RIGHT)
	tree.item_selected.connect(func() -> void: _show_detail(selected_index()))
	tree.resized.connect(_fit_columns)
	_split.add_child(tree)
	detail = TextEdit.new()
	detail.editable = false
	# Raw model output and prompts are long single lines: wrap them.
	detail.wrap_mode = TextEdit.LINE_WRAPPING_BOUNDARY
	# An attempt's lines are indented under it: so are their wrapped parts.
	detail.indent_wrapped_lines = true
	detail.size_flags_horizontal = Control.SIZE_EXPAND_FILL
	detail.size_flags_vertical = Control.SIZE_EXPAND_FILL
	_split.add_child(detail)
	resized.connect(_arrange)
	records = _live
	_rebuild()


func _ready() -> void:
	# Read-only text is greyed out by default; this text is there to be read.
	detail.add_theme_color_override("font_readonly_color", detail.get_theme_color("font_color"))


## A record the running game forwarded.
func add_record(record: Dictionary) -> void:
	_live.append(record)
	if _live.size() > MAX_LIVE:
		_live.pop_front()
		if source == "live":
			_rebuild()
			return
	if source == "live" and is_listed(record):
		_add_row(record)
		_fit_columns()
	if source == "live":
		status.text = _live_status()


func show_live() -> void:
	source = "live"
	records = _live
	_rebuild()
	status.text = _live_status()


func clear() -> void:
	_live = []
	show_live()


## Loads a debug package (JSON or compressed) to step through. Returns the error, or "".
func open_package(path: String) -> String:
	var file := LoreguardPackageFile.read(path)
	if not file.error.is_empty():
		status.text = "cannot open %s: %s" % [path.get_file(), file.error]
		return file.error
	source = path
	records = file.records
	_rebuild()
	status.text = "package %s (%s): %d record(s)" % [path.get_file(), file.form, records.size()]
	if not records.is_empty():
		select(0)
	return ""


## Whether the list shows `record`: always in a package; live, only this session's unless
## "Earlier sessions" is on (the forwarder marks each record).
func is_listed(record: Dictionary) -> bool:
	return source != "live" or show_earlier.button_pressed or not record.get("earlier_session", false)


## The records as listed, in the list's order.
func listed() -> Array:
	return records.filter(is_listed)


## The index in `records` of the selected row, or -1.
func selected_index() -> int:
	var item := tree.get_selected()
	return records.find(item.get_metadata(0)) if item != null else -1


func select(index: int) -> void:
	if index < 0 or index >= records.size() or not is_listed(records[index]):
		return
	var item := tree.get_root().get_child(listed().find(records[index]))
	item.select(0)
	tree.scroll_to_item(item)
	_show_detail(index)


## Moves the selection by `delta` records (the step buttons).
func step(delta: int) -> void:
	var shown := listed()
	if shown.is_empty():
		return
	var at := shown.find(records[selected_index()]) if selected_index() >= 0 else -1
	select(records.find(shown[clampi(at + delta, 0, shown.size() - 1)]))


## The game sent a package's text: ask where to save it.
func save_package_text(text: String, count: int) -> void:
	_package_text = text
	status.text = "package of %d record(s) received" % count
	var dialog := _file_dialog(FileDialog.FILE_MODE_SAVE_FILE)
	dialog.current_file = "loreguard-debug-package.json"
	dialog.popup_centered_ratio(0.6)


func write_package(path: String, text: String) -> String:
	var file := FileAccess.open(path, FileAccess.WRITE)
	if file == null:
		return "cannot write %s (%s)" % [path, error_string(FileAccess.get_open_error())]
	file.store_string(text)
	file.close()
	status.text = "saved %s" % path
	return ""


## The row cells of a record. Its id ("r6") is the one the detail's header, the game's
## `LoreguardLine.audit_record_id` and `loreguard replay` use.
static func summary(record: Dictionary) -> PackedStringArray:
	var receipt: Dictionary = _dict(record, "receipt")
	var context: Dictionary = _dict(record, "context")
	var said := str(context.get("player_input", ""))
	var scene := _dict(context, "scene_turn")
	if not scene.is_empty():
		# a scene's line answers what its speaker heard since it last spoke
		var heard := PackedStringArray()
		for line: Dictionary in _list(scene, "heard"):
			heard.append("%s: %s" % [line.get("speaker", ""), line.get("text", "")])
		said = "[scene %s #%d] %s" % [scene.get("scene_id", ""), int(scene.get("line", 0)), " / ".join(heard)]
	elif said.is_empty():
		said = "(%s)" % LoreguardGovernanceText.trigger(str(context.get("trigger_reason", "")))
	return PackedStringArray(
		[
			record_id(record),
			str(receipt.get("npc_id", "")),
			said,
			str(record.get("dialogue", "")),
			str(_list(receipt, "attempts").size()),
			refusals(record),
			"yes" if receipt.get("fallback_used", false) else "",
			"%.0f" % float(_dict(record, "timings").get("total_ms", 0.0)),
		]
	)


## "r6": the record's place in the sidecar's log.
static func record_id(record: Dictionary) -> String:
	return "r%d" % int(record.get("seq", 0))


## The gates that refused an attempt, each once, by code (`hard_limits`, `knowledge`).
static func failed_gates(record: Dictionary) -> PackedStringArray:
	var names := PackedStringArray()
	for attempt: Dictionary in _list(_dict(record, "receipt"), "attempts"):
		for check: Dictionary in _list(attempt, "gates"):
			if not check.get("passed", true) and not names.has(check.get("gate", "")):
				names.append(check.get("gate", ""))
	return names


## What refused the record's attempts, short: each gate once in words with the ids of the
## rules that failed, one gate a line, e.g. "designer rules [no_dragon]\nsecrets [password]".
static func refusals(record: Dictionary) -> String:
	var rules := {}
	for attempt: Dictionary in _list(_dict(record, "receipt"), "attempts"):
		for failure in LoreguardGovernanceText.attempt_failures(attempt):
			var gate := LoreguardGovernanceText.gate_short(str(failure.get("gate", "")))
			var ids: PackedStringArray = rules.get(gate, PackedStringArray())
			var rule := str(failure.get("rule_id")) if failure.get("rule_id") != null else ""
			if not rule.is_empty() and not ids.has(rule):
				ids.append(rule)
			rules[gate] = ids
	var parts := PackedStringArray()
	for gate: String in rules:
		var ids: PackedStringArray = rules[gate]
		parts.append(gate + (" [%s]" % ", ".join(ids) if not ids.is_empty() else ""))
	return "\n".join(parts)


## Everything about one interaction, as text: the decision in words, the constraints, each
## attempt (what ended it, each refusal with its rule's id, what it said, every gate's
## verdict, the raw output), then each attempt's prompt.
static func describe(record: Dictionary) -> String:
	var receipt: Dictionary = _dict(record, "receipt")
	var context: Dictionary = _dict(record, "context")
	var npc := str(receipt.get("npc_id", ""))
	var attempts := _list(receipt, "attempts")
	var outcome := LoreguardGovernanceText.outcome(str(receipt.get("outcome", "")), attempts.size())
	var lines := PackedStringArray()
	lines.append("%s · %s · %s" % [record_id(record), npc, outcome])
	# The NPC's own count picks its seed; said as a count so it is not read as a second id.
	lines.append(
		(
			"seed %d · %s's interaction no. %d · task %s"
			% [
				int(receipt.get("seed", 0)),
				npc,
				int(receipt.get("interaction_index", 0)) + 1,
				receipt.get("task_type", "")
			]
		)
	)
	var trigger := str(context.get("trigger_reason", ""))
	if receipt.get("fallback_reason") != null:
		lines.append("fallback: %s" % LoreguardGovernanceText.fallback(str(receipt["fallback_reason"]), npc, trigger))
	if receipt.get("halt_reason") != null:
		lines.append("halted: %s" % receipt["halt_reason"])
	var scene := _dict(context, "scene_turn")
	if scene.is_empty():
		lines.append("player (%s): %s" % [LoreguardGovernanceText.trigger(trigger), context.get("player_input", "")])
	else:
		lines.append_array(_describe_scene(scene))
	lines.append("%s (%s): %s" % [npc, record.get("emotion", ""), record.get("dialogue", "")])
	for intent: Dictionary in _list(record, "intents"):
		var shown := LoreguardGovernanceText.intent(str(intent.get("type", "")), _dict(intent, "params"))
		lines.append("approved action: %s" % shown)
	for warning: Dictionary in _list(receipt, "warnings"):
		lines.append("bent a soft rule: %s" % LoreguardGovernanceText.failure(warning))
	for skipped: Dictionary in _list(receipt, "skipped_fallbacks"):
		for failure: Dictionary in _list(skipped, "failures"):
			lines.append("passed over %s: %s" % [skipped.get("line", ""), LoreguardGovernanceText.failure(failure)])
	lines.append("rules in force: %s" % ", ".join(PackedStringArray(_list(receipt, "constraints"))))
	lines.append("constraints hash: %s" % receipt.get("constraints_hash", ""))
	lines.append(
		(
			"memory: %s -> %s"
			% [str(receipt.get("memory_hash_before", "")).left(16), str(receipt.get("memory_hash_after", "")).left(16)]
		)
	)
	for mutation: Dictionary in _list(receipt, "applied_mutations"):
		lines.append("applied change: %s" % JSON.stringify(mutation))
	for rejected: Dictionary in _list(receipt, "rejected_mutations"):
		lines.append("refused change: %s" % LoreguardGovernanceText.rejected_change(str(rejected.get("reason", ""))))
	for i in attempts.size():
		lines.append("")
		lines.append_array(_describe_attempt(attempts[i], LoreguardGovernanceText.attempt_used(receipt, i)))
	var prompts := _list(record, "prompts")
	for i in prompts.size():
		lines.append("")
		lines.append("--- prompt, attempt %d ---" % (i + 1))
		lines.append(str(prompts[i]))
	return "\n".join(lines)


## A scene's line: the scene, who heard it, what its speaker heard since it last spoke.
static func _describe_scene(scene: Dictionary) -> PackedStringArray:
	var present := PackedStringArray()
	for member: Dictionary in _list(scene, "present"):
		present.append(str(member.get("name", "")))
	if scene.get("player_present", false):
		present.append("the player")
	var lines := PackedStringArray()
	lines.append(
		(
			"scene %s, line %d · heard by: %s"
			% [
				scene.get("scene_id", ""),
				int(scene.get("line", 0)),
				", ".join(present) if not present.is_empty() else "nobody"
			]
		)
	)
	if not str(scene.get("topic", "")).is_empty():
		lines.append("topic: %s" % scene["topic"])
	for line: Dictionary in _list(scene, "heard"):
		lines.append("heard %s: %s" % [line.get("speaker", ""), line.get("text", "")])
	return lines


## The conversation a scene's line belongs to, up to it, from the records listed: each line
## said, the player's and the game's words among them, in order ("" for a line outside a scene).
static func scene_transcript(all_records: Array, record: Dictionary) -> String:
	var scene := _dict(_dict(record, "context"), "scene_turn")
	if scene.is_empty():
		return ""
	var by_line := {}
	for other: Dictionary in all_records:
		var other_scene := _dict(_dict(other, "context"), "scene_turn")
		if (
			other_scene.get("scene_id") == scene.get("scene_id")
			and int(other_scene.get("line", 0)) <= int(scene["line"])
		):
			by_line[int(other_scene["line"])] = other
	var numbers := by_line.keys()
	numbers.sort()
	var lines := PackedStringArray(
		["--- scene %s, lines 1 to %d ---" % [scene.get("scene_id", ""), int(scene["line"])]]
	)
	for number: int in numbers:
		var line_record: Dictionary = by_line[number]
		for heard: Dictionary in _list(_dict(_dict(line_record, "context"), "scene_turn"), "heard"):
			if heard.get("kind") != "npc":
				lines.append("   %s: %s" % [heard.get("speaker", ""), heard.get("text", "")])
		var speaker := str(_dict(line_record, "receipt").get("npc_id", ""))
		lines.append("#%d %s: %s" % [number, speaker, line_record.get("dialogue", "")])
	return "\n".join(lines)


## One attempt: what ended it, why, what it said, each gate's verdict and the raw output.
static func _describe_attempt(attempt: Dictionary, used: bool) -> PackedStringArray:
	var lines := PackedStringArray()
	var ending := LoreguardGovernanceText.attempt_ending(attempt, used)
	lines.append("attempt %d: %s" % [int(attempt.get("attempt", 0)), ending])
	for failure in LoreguardGovernanceText.attempt_failures(attempt):
		lines.append("  • %s" % LoreguardGovernanceText.failure(failure))
	lines.append("  said: “%s”" % LoreguardGovernanceText.attempt_text(attempt))
	var verdicts := PackedStringArray()
	for check: Dictionary in _list(attempt, "gates"):
		var verdict := "pass" if check.get("passed", false) else "FAIL (%d)" % int(check.get("failures", 0))
		if check.get("skipped") != null:
			verdict = "skipped: %s" % check["skipped"]
		verdicts.append("%s %s" % [LoreguardGovernanceText.gate_short(str(check.get("gate", ""))), verdict])
	lines.append("  checks: %s" % " · ".join(verdicts))
	for check: Dictionary in _list(attempt, "gates"):
		if check.get("note") != null:
			lines.append(
				"  note (%s): %s" % [LoreguardGovernanceText.gate_short(str(check.get("gate", ""))), check["note"]]
			)
	var stream := _dict(attempt, "stream")
	if not _dict(stream, "cut").is_empty():
		# A cut generation stops mid-JSON: its parse path says nothing about the model.
		lines.append("  read: not parsed whole (the generation was cut)")
	else:
		lines.append("  read: %s" % attempt.get("parse_path", ""))
	lines.append("  raw output: %s" % attempt.get("raw_output", ""))
	return lines


func _rebuild() -> void:
	tree.clear()
	tree.create_item()
	detail.text = ""
	for record: Dictionary in listed():
		_add_row(record)
	_fit_columns()


func _add_row(record: Dictionary) -> void:
	var item := tree.create_item(tree.get_root())
	item.set_metadata(0, record)
	var cells := summary(record)
	for i in cells.size():
		item.set_text(i, cells[i])
		if EXPANDING.has(i):
			item.set_autowrap_mode(i, TextServer.AUTOWRAP_WORD_SMART)
	item.set_text_alignment(COLUMNS.size() - 1, HORIZONTAL_ALIGNMENT_RIGHT)
	var receipt := _dict(record, "receipt")
	var reasons := PackedStringArray()
	for attempt: Dictionary in _list(receipt, "attempts"):
		for failure in LoreguardGovernanceText.attempt_failures(attempt):
			reasons.append(
				"attempt %d: %s" % [int(attempt.get("attempt", 0)), LoreguardGovernanceText.failure(failure)]
			)
	item.set_tooltip_text(5, "\n".join(reasons))
	if receipt.get("fallback_used", false):
		item.set_custom_color(3, Color(1.0, 0.6, 0.3))
		var why := str(receipt.get("fallback_reason", ""))
		var trigger := str(_dict(record, "context").get("trigger_reason", ""))
		item.set_tooltip_text(6, LoreguardGovernanceText.fallback(why, str(receipt.get("npc_id", "")), trigger))


## Every column that does not wrap is as wide as its title or widest cell, so "guard" never
## shows as "gua" nor "1204" as "12…"; a wrapping one is as wide as its longest word, unless
## that leaves too little room for the others (then a long word breaks: better than a list that
## scrolls sideways, hiding the last columns).
func _fit_columns() -> void:
	var font := tree.get_theme_font("font")
	var font_size := tree.get_theme_font_size("font_size")
	var title_font := tree.get_theme_font("title_button_font")
	var title_size := tree.get_theme_font_size("title_button_font_size")
	var wanted := {}
	var fixed := 0
	for column in COLUMNS.size():
		var widest := title_font.get_string_size(COLUMNS[column], HORIZONTAL_ALIGNMENT_LEFT, -1, title_size).x
		var row := tree.get_root().get_first_child()
		while row != null:
			var text := row.get_text(column)
			var words := text.replace("\n", " ").split(" ") if EXPANDING.has(column) else PackedStringArray([text])
			for word in words:
				widest = maxf(widest, font.get_string_size(word, HORIZONTAL_ALIGNMENT_LEFT, -1, font_size).x)
			row = row.get_next()
		var width := int(ceil(widest)) + CELL_PADDING
		if EXPANDING.has(column):
			wanted[column] = maxi(width, EXPANDING[column] * MIN_WIDTH_PER_SHARE)
		else:
			fixed += width
			tree.set_column_custom_minimum_width(column, width)
	# The room the wrapping columns share: the tree's, less its panel and a scrollbar.
	var room := tree.size.x - tree.get_theme_stylebox("panel").get_minimum_size().x - SCROLLBAR_ROOM - fixed
	var total := 0
	for column: int in wanted:
		total += wanted[column]
	var shrink := room / total if tree.size.x > 0.0 and total > room else 1.0
	for column: int in wanted:
		var least: int = EXPANDING[column] * MIN_WIDTH_PER_SHARE
		tree.set_column_custom_minimum_width(column, maxi(least, int(wanted[column] * shrink)))


## Side by side when the tab is wide enough for both, else the list over the detail.
func _arrange() -> void:
	_split.vertical = size.x < SIDE_BY_SIDE_WIDTH


func _live_status() -> String:
	var hidden := _live.size() - _live.filter(is_listed).size()
	var note := " (%d from earlier sessions hidden)" % hidden if hidden > 0 else ""
	return "live: %d interaction(s)%s" % [_live.size() - hidden, note]


func _show_detail(index: int) -> void:
	if index >= 0 and index < records.size():
		var conversation := scene_transcript(records, records[index])
		detail.text = describe(records[index]) + ("\n\n" + conversation if not conversation.is_empty() else "")


func _choose_package() -> void:
	var dialog := _file_dialog(FileDialog.FILE_MODE_OPEN_FILE)
	dialog.popup_centered_ratio(0.6)


func _file_dialog(mode: FileDialog.FileMode) -> FileDialog:
	if _dialog == null:
		_dialog = FileDialog.new()
		_dialog.access = FileDialog.ACCESS_FILESYSTEM
		_dialog.filters = PackedStringArray(["*.json ; JSON package", "*.lgp ; compressed package"])
		_dialog.file_selected.connect(_on_file_selected)
		add_child(_dialog)
	_dialog.file_mode = mode
	return _dialog


func _on_file_selected(path: String) -> void:
	if _dialog.file_mode == FileDialog.FILE_MODE_SAVE_FILE:
		var problem := write_package(path, _package_text)
		if not problem.is_empty():
			status.text = problem
	else:
		open_package(path)


## `data[key]` when it is a dictionary (the wire may leave a field out or send null), else {}.
static func _dict(data: Dictionary, key: String) -> Dictionary:
	return data[key] if data.get(key) is Dictionary else {}


## `data[key]` when it is an array, else [].
static func _list(data: Dictionary, key: String) -> Array:
	return data[key] if data.get(key) is Array else []


static func _button(bar: Container, text: String, pressed: Callable) -> void:
	var button := Button.new()
	button.text = text
	button.pressed.connect(pressed)
	bar.add_child(button)
