@icon("../icon.svg")
class_name LoreguardTypewriter
extends Node
## Types text into a RichTextLabel a few characters at a time: streamed chunks appear as if the
## NPC were speaking them. Text appended while earlier text is still typing waits its turn.
##
##     $Typewriter.label = $Panel/Dialogue
##     $Guard.dialogue_chunk.connect($Typewriter.type_text)

## The label to type into (its BBCode is kept; only the visible characters advance).
@export var label: RichTextLabel
## Typing speed.
@export var chars_per_second: float = 45.0

var _shown: float = 0.0


## Appends `bbcode` to the label and types it out after anything still typing.
func type_text(bbcode: String) -> void:
	if label == null:
		return
	if label.visible_characters < 0:
		_shown = label.get_total_character_count()
	label.append_text(bbcode)
	label.visible_characters = int(_shown)


## Shows everything at once (e.g. when the player skips ahead).
func finish() -> void:
	if label != null:
		label.visible_characters = -1


## True while text is still being typed.
func is_typing() -> bool:
	return label != null and label.visible_characters >= 0


func _process(delta: float) -> void:
	if label == null or label.visible_characters < 0:
		return
	_shown += chars_per_second * delta
	if _shown >= label.get_total_character_count():
		label.visible_characters = -1
	else:
		label.visible_characters = int(_shown)
