@icon("../icon.svg")
class_name LoreguardTypewriter
extends Node
## Types text into a RichTextLabel a few characters at a time: streamed chunks appear as if the
## NPC were speaking them. Text appended while earlier text is still typing waits its turn.
##
##     $Typewriter.label = $Panel/Dialogue
##     $Guard.dialogue_chunk.connect($Typewriter.type_text)
##
## It types at `chars_per_second`, but never more than `max_lag_s` behind the text it was given:
## a streamed line arrives at about the pace it is typed, and a whole line that arrives at once
## is shown within `max_lag_s`, so the typewriter never holds back a line that is already there.
## A click on the label or the `skip_action` (or any key, with `skip_on_any_key`) shows the rest
## at once.

## The label to type into (its BBCode is kept; only the visible characters advance).
@export var label: RichTextLabel
## Typing speed, as long as it keeps within `max_lag_s` of the text received (faster otherwise).
## From a script, 0 or less shows text at once.
@export_range(1.0, 1000.0, 1.0, "or_greater", "suffix:chars/s") var chars_per_second: float = 45.0
## The most any received text waits before it is shown: typing speeds up to meet this. 0 shows
## text at once.
@export_range(0.0, 5.0, 0.05, "suffix:s") var max_lag_s: float = 0.5
## The input action that shows the rest at once (empty: none). Seen before the GUI, so the
## player's Enter in a text box also skips.
@export var skip_action: StringName = &"ui_accept"
## A mouse click on the label shows the rest at once.
@export var skip_on_click: bool = true
## Any key pressed shows the rest at once (off: only `skip_action`).
@export var skip_on_any_key: bool = false

var _shown: float = 0.0
## Seconds of typing so far (the sum of `advance` deltas), the clock of the deadlines below.
var _clock_s: float = 0.0
## By _deadline_at[i] (on _clock_s), _deadline_chars[i] characters must be shown; in order.
var _deadline_chars: PackedInt64Array = []
var _deadline_at: PackedFloat64Array = []


## Appends `bbcode` to the label and types it out after anything still typing.
func type_text(bbcode: String) -> void:
	if label == null:
		return
	if label.visible_characters < 0:
		_shown = label.get_total_character_count()
	label.append_text(bbcode)
	if chars_per_second <= 0.0 or max_lag_s <= 0.0:
		finish()  # a speed set to 0 from a script: no typing, and never a hang
		return
	_deadline_chars.append(label.get_total_character_count())
	_deadline_at.append(_clock_s + max_lag_s)
	label.visible_characters = int(_shown)


## Shows everything at once (e.g. when the player skips ahead).
func finish() -> void:
	_deadline_chars.clear()
	_deadline_at.clear()
	if label != null:
		label.visible_characters = -1


## True while text is still being typed.
func is_typing() -> bool:
	return label != null and label.visible_characters >= 0


## Moves the typing on by `delta` seconds (each frame; a test may call it with its own steps).
func advance(delta: float) -> void:
	if label == null or label.visible_characters < 0:
		return
	if chars_per_second <= 0.0 or max_lag_s <= 0.0:
		finish()
		return
	_clock_s += delta
	var target := _shown + chars_per_second * delta
	for i in _deadline_chars.size():
		var left := _deadline_at[i] - _clock_s
		if left <= 0.0:
			target = maxf(target, _deadline_chars[i])
		else:
			# Linear to the deadline: what is left of this text, spread over the time left.
			target = maxf(target, _shown + (_deadline_chars[i] - _shown) * delta / (left + delta))
	_shown = target
	while not _deadline_chars.is_empty() and _shown >= _deadline_chars[0]:
		_deadline_chars.remove_at(0)
		_deadline_at.remove_at(0)
	if _shown >= label.get_total_character_count():
		finish()
	else:
		label.visible_characters = int(_shown)


func _process(delta: float) -> void:
	advance(delta)


func _input(event: InputEvent) -> void:
	if not is_typing() or not event.is_pressed() or event.is_echo():
		return
	var skip := not skip_action.is_empty() and InputMap.has_action(skip_action) and event.is_action(skip_action)
	skip = skip or skip_on_any_key and event is InputEventKey
	if skip_on_click and event is InputEventMouseButton and label.is_visible_in_tree():
		skip = skip or label.get_global_rect().has_point((event as InputEventMouseButton).global_position)
	if skip:
		finish()  # the event goes on: the Enter that skips may also send the player's line
