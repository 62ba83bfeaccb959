@icon("../icon.svg")
class_name LoreguardGovernanceLog
extends RichTextLabel
## How each NPC line was checked, for a designer to read while playing: one entry per line
## (its number, the NPC, the outcome, the latency), and under it each attempt the model made
## with its refusals in plain words and the rule's id in brackets (LoreguardGovernanceText);
## what a refused attempt said is folded away behind a click. Then the fallback and why, the
## approved intents, and anything else refused. Each entry starts with its line's number:
## clicking it emits `line_clicked`, so the game can show that line in its dialogue.
##
##     $GovernanceLog.add_line(3, line, "Brom", 1200)
##     $GovernanceLog.line_clicked.connect(func(n: int) -> void: $Dialogue.scroll_to_paragraph(...))

## The player clicked the number that starts an entry: the game may show line `number`.
signal line_clicked(number: int)

## A refused attempt and its reasons.
@export var refused_color: Color = Color("#ee9999")
## The attempt whose line was spoken, and approved intents.
@export var passed_color: Color = Color("#88cc88")
## The fallback and why it was needed.
@export var fallback_color: Color = Color("#ffcc88")
## The line numbers (links to the dialogue).
@export var number_color: Color = Color("#99ccff")
## Latency and what a refused attempt said.
@export var quiet_color: Color = Color("#aab4be")

## One per line: {number, npc, line, latency_ms, trigger}, in the order added.
var _entries: Array[Dictionary] = []
## "number:attempt" of each refused attempt whose text is unfolded.
var _unfolded: Dictionary = {}
## Line number -> the paragraph its entry starts at.
var _paragraphs: Dictionary = {}


func _init() -> void:
	bbcode_enabled = true
	meta_clicked.connect(_on_meta_clicked)


## Adds the entry of line `number`, which `npc_name` said in `latency_ms`; `trigger_reason` is
## what made the NPC speak ("player_utterance" for `LoreguardNPC.say`), for the fallback's why.
func add_line(
	number: int, line: LoreguardLine, npc_name: String, latency_ms: int, trigger_reason: String = "player_utterance"
) -> void:
	var entry := {"number": number, "npc": npc_name, "line": line, "latency_ms": latency_ms, "trigger": trigger_reason}
	_entries.append(entry)
	_append(entry)


## How many lines are listed.
func entry_count() -> int:
	return _entries.size()


## The listed lines, in order: {number, npc, line, latency_ms, trigger} each (a copy).
func entries() -> Array[Dictionary]:
	return _entries.duplicate()


## Unfolds (or folds) what refused attempt `attempt` of line `number` said.
func show_refused_text(number: int, attempt: int, shown: bool = true) -> void:
	var key := "%d:%d" % [number, attempt]
	if shown == _unfolded.has(key):
		return
	if shown:
		_unfolded[key] = true
	else:
		_unfolded.erase(key)
	_render()


## Scrolls so that the entry of line `number` starts at the top (as far as the log scrolls).
func scroll_to_entry(number: int) -> void:
	if _paragraphs.has(number):
		scroll_to_paragraph(_paragraphs[number])


func is_refused_text_shown(number: int, attempt: int) -> bool:
	return _unfolded.has("%d:%d" % [number, attempt])


func clear_lines() -> void:
	_entries.clear()
	_unfolded.clear()
	_paragraphs.clear()
	clear()


## One entry as BBCode: the header line, then everything under it indented (so wrapped lines
## keep their indent), reasons one level deeper than their attempt.
func entry_bbcode(entry: Dictionary) -> String:
	var line: LoreguardLine = entry["line"]
	var number: int = entry["number"]
	var receipt: Dictionary = line.body.get("receipt") if line.body.get("receipt") is Dictionary else {}
	var text := (
		"[url=line:%d][color=#%s]#%d[/color][/url] [b]%s[/b] · %s [color=#%s]· %d ms[/color]\n"
		% [
			number,
			number_color.to_html(false),
			number,
			_escape(entry["npc"]),
			_escape(
				(
					LoreguardGovernanceText.outcome_of(receipt)
					if not receipt.is_empty()
					else LoreguardGovernanceText.outcome(line.outcome, line.attempts)
				)
			),
			quiet_color.to_html(false),
			entry["latency_ms"],
		]
	)
	var attempts := _list(receipt, "attempts")
	var under := ""
	# A line that passed first time needs no attempt list: the header says so.
	if attempts.size() > 1 or line.outcome != LoreguardLine.VALIDATED:
		for i in attempts.size():
			under += _attempt_bbcode(number, attempts[i], LoreguardGovernanceText.attempt_used(receipt, i))
	for warning: Variant in _list(receipt, "warnings"):
		if warning is Dictionary:
			under += _tinted("bent a soft rule: " + LoreguardGovernanceText.failure(warning), fallback_color)
	if line.fallback_used:
		var why := LoreguardGovernanceText.fallback(line.fallback_reason(), entry["npc"], entry["trigger"])
		under += _tinted("fallback: " + why, fallback_color)
		for skipped: Variant in _list(receipt, "skipped_fallbacks"):
			under += _skipped_bbcode(skipped)
	if line.outcome == LoreguardLine.CLARIFY and not line.needs.is_empty():
		under += _tinted("needs from the game: " + ", ".join(line.needs), fallback_color)
	for intent in line.intents:
		var price := " for " + intent.price_text() if intent.is_sale() else ""
		under += _tinted(
			"approved action: " + LoreguardGovernanceText.intent(intent.type, intent.params) + price, passed_color
		)
	# A request the designer's rules decided, not the model: the sale or the refusal, and why.
	for deal: Variant in _list(receipt, "deals"):
		if deal is Dictionary:
			var granted: bool = deal.get("granted", false)
			var verdict := "decided by the rules: %s" % ("sold" if granted else "no sale")
			under += _tinted(
				"%s (%s)" % [verdict, deal.get("reason", "")], passed_color if granted else fallback_color
			)
	for rejected: Variant in _list(receipt, "rejected_mutations"):
		if rejected is Dictionary:
			var change := LoreguardGovernanceText.rejected_change(str(rejected.get("reason", "")))
			under += _tinted("refused a change it asked for: " + change, refused_color)
	return text + ("[indent]%s[/indent]" % under.trim_suffix("\n") + "\n" if not under.is_empty() else "")


func _attempt_bbcode(number: int, attempt: Dictionary, used: bool) -> String:
	var index := int(attempt.get("attempt", 0))
	var ending := LoreguardGovernanceText.attempt_ending(attempt, used)
	var text := _tinted("attempt %d: %s" % [index, ending], passed_color if used else refused_color)
	var reasons := PackedStringArray()
	for failure in LoreguardGovernanceText.attempt_failures(attempt):
		reasons.append(_escape(LoreguardGovernanceText.failure(failure)))
	for kept_out in LoreguardGovernanceText.attempt_prevented(attempt):
		reasons.append(_escape("kept out while written: " + kept_out))
	if not reasons.is_empty():
		# A list: a reason that wraps hangs under its own first word, not under the bullet.
		text += "[ul]%s[/ul]\n" % "\n".join(reasons)
	var said := LoreguardGovernanceText.attempt_text(attempt)
	if used or said.is_empty():
		return text
	var key := "%d:%d" % [number, index]
	if not _unfolded.has(key):
		return text + "[indent][url=said:%s]▸ show what it said[/url][/indent]\n" % key
	return (
		text
		+ (
			"[indent][url=said:%s]▾ hide what it said[/url]\n[i][color=#%s]“%s”[/color][/i][/indent]\n"
			% [key, quiet_color.to_html(false), _escape(said)]
		)
	)


func _skipped_bbcode(skipped: Variant) -> String:
	if not skipped is Dictionary:
		return ""
	var broken := PackedStringArray()
	for failure: Variant in _list(skipped, "failures"):
		if failure is Dictionary:
			broken.append(LoreguardGovernanceText.failure(failure))
	var why := "; ".join(broken) if not broken.is_empty() else "it would break a rule"
	return _tinted("passed over an authored line: " + why, quiet_color)


## `text` escaped, coloured, as one paragraph.
func _tinted(text: String, color: Color) -> String:
	return "[color=#%s]%s[/color]\n" % [color.to_html(false), _escape(text)]


## Every entry again (after folding or unfolding one), keeping the scroll where it was.
func _render() -> void:
	var at := get_v_scroll_bar().value
	var following := scroll_following
	scroll_following = false
	clear()
	for entry in _entries:
		_append(entry)
	get_v_scroll_bar().value = at
	scroll_following = following


func _append(entry: Dictionary) -> void:
	_paragraphs[entry["number"]] = get_paragraph_count() - 1
	append_text(entry_bbcode(entry))


func _on_meta_clicked(meta: Variant) -> void:
	var parts := str(meta).split(":")
	if parts.size() == 2 and parts[0] == "line":
		line_clicked.emit(int(parts[1]))
	elif parts.size() == 3 and parts[0] == "said":
		show_refused_text(int(parts[1]), int(parts[2]), not is_refused_text_shown(int(parts[1]), int(parts[2])))


## `data[key]` when it is an array (a field the wire may leave out or send as null), else [].
static func _list(data: Dictionary, key: String) -> Array:
	return data[key] if data.get(key) is Array else []


static func _escape(text: String) -> String:
	return text.replace("[", "[lb]")
