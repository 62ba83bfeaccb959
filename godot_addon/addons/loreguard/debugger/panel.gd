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
## The words of the rows and of the detail are LoreguardRecordText's; this is the tab itself: the
## list and its columns, the detail, the buttons and the package files.

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


## The row cells of a record (LoreguardRecordText.summary). Its id ("r6") is the one the
## detail's header, the game's `LoreguardLine.audit_record_id` and `loreguard replay` use.
static func summary(record: Dictionary) -> PackedStringArray:
	return LoreguardRecordText.summary(record)


## "r6": the record's place in the sidecar's log.
static func record_id(record: Dictionary) -> String:
	return LoreguardRecordText.record_id(record)


## The gates that refused an attempt, each once, by code (`hard_limits`, `knowledge`).
static func failed_gates(record: Dictionary) -> PackedStringArray:
	return LoreguardRecordText.failed_gates(record)


## What refused the record's attempts, short: each gate once, with the failed rules' ids.
static func refusals(record: Dictionary) -> String:
	return LoreguardRecordText.refusals(record)


## Everything about one interaction, as text (LoreguardRecordText.describe).
static func describe(record: Dictionary) -> String:
	return LoreguardRecordText.describe(record)


## The conversation a scene's line belongs to, up to it ("" for a line outside a scene).
static func scene_transcript(all_records: Array, record: Dictionary) -> String:
	return LoreguardRecordText.scene_transcript(all_records, record)


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
	var cells := LoreguardRecordText.summary(record)
	for i in cells.size():
		item.set_text(i, cells[i])
		if EXPANDING.has(i):
			item.set_autowrap_mode(i, TextServer.AUTOWRAP_WORD_SMART)
	item.set_text_alignment(COLUMNS.size() - 1, HORIZONTAL_ALIGNMENT_RIGHT)
	item.set_tooltip_text(5, LoreguardRecordText.refusal_details(record))
	var fallback := LoreguardRecordText.fallback_note(record)
	if not fallback.is_empty():
		item.set_custom_color(3, Color(1.0, 0.6, 0.3))
		item.set_tooltip_text(6, fallback)


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
		var text := LoreguardRecordText.describe(records[index])
		var conversation := LoreguardRecordText.scene_transcript(records, records[index])
		detail.text = text + ("\n\n" + conversation if not conversation.is_empty() else "")


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


static func _button(bar: Container, text: String, pressed: Callable) -> void:
	var button := Button.new()
	button.text = text
	button.pressed.connect(pressed)
	bar.add_child(button)
