@tool
@icon("../icon.svg")
class_name LoreguardDebuggerPanel
extends VBoxContainer
## The "Loreguard" tab of the editor's debugger: the running game's interactions as they
## happen (NPC, input, dialogue, attempts, failed gates, fallback, latency). Selecting one shows
## its prompts, constraints and every gate's verdict. "Export debug package" asks the game for
## a package of the newest records; "Open package…" loads one and Prev/Next step through it.
## Records the sidecar kept from earlier game sessions are hidden unless "Earlier sessions" is on.

## The "Export debug package" button: ask the game for its newest `last` records.
signal export_requested(last: int)

const COLUMNS: PackedStringArray = ["#", "NPC", "Input", "Dialogue", "Attempts", "Failed gates", "Fallback", "ms"]
## The columns that share the spare width; the others are as wide as their widest cell.
const EXPANDING := [2, 3, 5]
## Room around a cell's text (the tree's inner margins and a gap).
const CELL_PADDING := 24
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
var _dialog: FileDialog
var _package_text: String = ""


func _init() -> void:
	name = "Loreguard"
	var bar := HBoxContainer.new()
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
	bar.add_child(status)
	var split := HSplitContainer.new()
	split.size_flags_vertical = Control.SIZE_EXPAND_FILL
	add_child(split)
	tree = Tree.new()
	tree.columns = COLUMNS.size()
	tree.column_titles_visible = true
	tree.hide_root = true
	tree.select_mode = Tree.SELECT_ROW
	tree.size_flags_horizontal = Control.SIZE_EXPAND_FILL
	for i in COLUMNS.size():
		tree.set_column_title(i, COLUMNS[i])
		tree.set_column_expand(i, i in EXPANDING)
		tree.set_column_clip_content(i, i in EXPANDING)
	tree.item_selected.connect(func() -> void: _show_detail(selected_index()))
	split.add_child(tree)
	detail = TextEdit.new()
	detail.editable = false
	# Raw model output and prompts are long single lines: wrap them.
	detail.wrap_mode = TextEdit.LINE_WRAPPING_BOUNDARY
	detail.size_flags_horizontal = Control.SIZE_EXPAND_FILL
	split.add_child(detail)
	records = _live
	_rebuild()


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


## The row cells of a record.
static func summary(record: Dictionary) -> PackedStringArray:
	var receipt: Dictionary = record.get("receipt", {})
	var context: Dictionary = record.get("context", {})
	var said: String = context.get("player_input", "")
	if said.is_empty():
		said = "<%s>" % context.get("trigger_reason", "")
	return PackedStringArray(
		[
			"r%d" % int(record.get("seq", 0)),
			str(receipt.get("npc_id", "")),
			said,
			str(record.get("dialogue", "")),
			str(receipt.get("attempts", []).size()),
			", ".join(failed_gates(record)),
			"yes" if receipt.get("fallback_used", false) else "",
			"%.0f" % float(record.get("timings", {}).get("total_ms", 0.0)),
		]
	)


static func failed_gates(record: Dictionary) -> PackedStringArray:
	var names := PackedStringArray()
	for attempt: Dictionary in record.get("receipt", {}).get("attempts", []):
		for check: Dictionary in attempt.get("gates", []):
			if not check.get("passed", true) and not names.has(check.get("gate", "")):
				names.append(check.get("gate", ""))
	return names


## Everything about one interaction, as text: the decision, the constraints, each attempt's
## gates and raw output, then each attempt's prompt.
static func describe(record: Dictionary) -> String:
	var receipt: Dictionary = record.get("receipt", {})
	var context: Dictionary = record.get("context", {})
	var lines := PackedStringArray()
	(
		lines
		. append(
			(
				"r%d  %s  interaction %d  seed %d  %s"
				% [
					int(record.get("seq", 0)),
					receipt.get("npc_id", ""),
					int(receipt.get("interaction_index", 0)),
					int(receipt.get("seed", 0)),
					receipt.get("outcome", ""),
				]
			)
		)
	)
	if receipt.get("fallback_reason") != null:
		lines.append("fallback: %s" % receipt["fallback_reason"])
	lines.append("player (%s): %s" % [context.get("trigger_reason", ""), context.get("player_input", "")])
	lines.append("npc: %s  (%s)" % [record.get("dialogue", ""), record.get("emotion", "")])
	for intent: Dictionary in record.get("intents", []):
		lines.append("intent: %s %s" % [intent.get("type", ""), JSON.stringify(intent.get("params", {}))])
	lines.append("constraints: %s" % ", ".join(PackedStringArray(receipt.get("constraints", []))))
	lines.append("constraints hash: %s" % receipt.get("constraints_hash", ""))
	lines.append(
		(
			"memory: %s -> %s"
			% [str(receipt.get("memory_hash_before", "")).left(16), str(receipt.get("memory_hash_after", "")).left(16)]
		)
	)
	for mutation: Dictionary in receipt.get("applied_mutations", []):
		lines.append("applied: %s" % JSON.stringify(mutation))
	for rejected: Dictionary in receipt.get("rejected_mutations", []):
		lines.append("rejected: %s" % rejected.get("reason", ""))
	for attempt: Dictionary in receipt.get("attempts", []):
		lines.append("")
		lines.append("attempt %d  (parse %s)" % [int(attempt.get("attempt", 0)), attempt.get("parse_path", "")])
		for check: Dictionary in attempt.get("gates", []):
			var verdict := "pass" if check.get("passed", false) else "FAIL (%d)" % int(check.get("failures", 0))
			lines.append("  %-12s %s" % [check.get("gate", ""), verdict])
		for failure: Dictionary in attempt.get("failures", []):
			lines.append(
				"  ! %s [%s] %s" % [failure.get("gate", ""), failure.get("severity", ""), failure.get("reason", "")]
			)
		lines.append("  raw output: %s" % attempt.get("raw_output", ""))
	var prompts: Array = record.get("prompts", [])
	for i in prompts.size():
		lines.append("")
		lines.append("--- prompt, attempt %d ---" % (i + 1))
		lines.append(str(prompts[i]))
	return "\n".join(lines)


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
	if record.get("receipt", {}).get("fallback_used", false):
		item.set_custom_color(3, Color(1.0, 0.6, 0.3))


## Every column that does not expand is as wide as its title or widest cell, so "guard" never
## shows as "gua".
func _fit_columns() -> void:
	var font := tree.get_theme_font("font")
	var title_font := tree.get_theme_font("title_button_font")
	var size := tree.get_theme_font_size("font_size")
	for column in COLUMNS.size():
		if column in EXPANDING:
			continue
		var widest := title_font.get_string_size(COLUMNS[column], HORIZONTAL_ALIGNMENT_LEFT, -1, size).x
		var row := tree.get_root().get_first_child()
		while row != null:
			widest = maxf(widest, font.get_string_size(row.get_text(column), HORIZONTAL_ALIGNMENT_LEFT, -1, size).x)
			row = row.get_next()
		tree.set_column_custom_minimum_width(column, int(ceil(widest)) + CELL_PADDING)


func _live_status() -> String:
	var hidden := _live.size() - _live.filter(is_listed).size()
	var note := " (%d from earlier sessions hidden)" % hidden if hidden > 0 else ""
	return "live: %d interaction(s)%s" % [_live.size() - hidden, note]


func _show_detail(index: int) -> void:
	if index >= 0 and index < records.size():
		detail.text = describe(records[index])


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


static func _button(bar: HBoxContainer, text: String, pressed: Callable) -> void:
	var button := Button.new()
	button.text = text
	button.pressed.connect(pressed)
	bar.add_child(button)
