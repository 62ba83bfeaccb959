@tool
@icon("../icon.svg")
class_name LoreguardNpcProfile
extends Resource
## Who an NPC is: persona, the truths it knows, its secrets, what it may do in the world, and
## what it says when no valid line can be produced. Rules come separately, as rule sets on the
## LoreguardNPC node, so several NPCs can share them.

## The NPC's id on the wire (letters, digits, _ . : -); unique per game.
@export var id: String = ""
## The name the NPC goes by (sent as `name`), e.g. for your dialogue UI.
@export var display_name: String = ""
## Persona and system prompt: who the NPC is and how it speaks.
@export_multiline var persona: String = ""
## Truths this NPC knows and must never contradict.
@export var canonical_facts: Array[LoreguardFact] = []
## What this NPC knows but must never reveal.
@export var secrets: Array[LoreguardSecret] = []
## The world intents this NPC may ask the game for; any other is refused.
@export var allowed_intents: Array[LoreguardIntent] = []
## Example exchanges that show the model this NPC's voice.
@export var few_shot: Array[LoreguardExample] = []
## Amounts of money the line states about nothing the prompt carried (no price in world state
## or facts): "allow" them, or "flag" them (retried, then accepted with a warning).
@export_enum("allow", "flag") var ungrounded_numbers: String = "allow"
## Speaker labels, stage directions, trailing fragments in a line: "clean" strips them (a
## direction that names a feeling sets the emotion), "strict" sends the line back to the model.
@export_enum("clean", "strict") var output_hygiene: String = "clean"

@export_group("Fallbacks")
## Lines per trigger reason, tried first (before `fallbacks` and the world's).
@export var fallbacks_by_trigger: Array[LoreguardFallback] = []
## Lines for any trigger.
@export var fallbacks: PackedStringArray

@export_group("Working memory")
## Recent player/NPC exchanges kept in the prompt.
@export_range(0, 64) var max_exchanges: int = 4
## Remembered events retrieved into the prompt, most relevant first.
@export_range(0, 256) var max_episodic: int = 6
## Beliefs (about the player, other NPCs) retrieved into the prompt.
@export_range(0, 256) var max_beliefs: int = 6
## How many of `few_shot` go into one prompt.
@export_range(0, 32) var max_few_shot: int = 3
## Character budget of one prompt (canonical facts are never dropped to meet it).
@export_range(500, 400000) var max_chars: int = 12000
## Beliefs below this confidence are not retrieved.
@export_range(0.0, 1.0) var belief_threshold: float = 0.2

@export_group("Output limits")
## A span of at least this many words said twice in a row is a loop, and the line is retried
## (0: not checked).
@export_range(0, 32) var loop_span_words: int = 3
## Length of the word runs counted for repetition.
@export_range(2, 16) var ngram_words: int = 3
## A word run said more often than this is a loop (0: not checked).
@export_range(0, 64) var max_ngram_repeats: int = 2
## Share of a long line's words that repeat earlier ones, above which it is a loop (1: off).
@export_range(0.0, 1.0) var max_repeated_word_ratio: float = 0.6
## The repeated-word share is judged only on lines with at least this many words.
@export_range(2, 2000) var min_words_for_ratio: int = 16
## Retry a line that leaves a bracket or quote open, or closes one never opened.
@export var unbalanced_brackets: bool = true
## Retry a line that stops in the middle of a word.
@export var ends_mid_word: bool = true
## Text never shown to a player, on top of the model's own special tokens (which the sidecar
## asks the model for).
@export var special_tokens: PackedStringArray
## A line this similar (0..1) to an example line, the player's line or the persona is parroting
## and is retried (above 1: off).
@export_range(0.0, 1.01) var max_copy_similarity: float = 0.8
## Lines shorter than this many words are never parroting ("Aye, traveller.").
@export_range(1, 200) var min_copy_words: int = 4
## A line (or one of its sentences) this similar (0..1] to one of the NPC's recent lines, said to
## another question, repeats itself and is retried.
@export_range(0.01, 1.0) var max_self_similarity: float = 0.8
## Sentences shorter than this many words may be said again ("Move along, traveller.").
@export_range(1, 200) var min_repeat_words: int = 5
## How many of the NPC's last lines a new one is compared with (0: off).
@export_range(0, 64) var repeat_window: int = 24


## The `npc.register` body: this profile plus every rule of `rule_sets`.
func to_dict(rule_sets: Array[LoreguardRuleSet] = []) -> Dictionary:
	return {
		"id": id,
		"name": display_name,
		"persona": persona,
		"canonical_facts": LoreguardDict.to_dicts(canonical_facts),
		"secrets": LoreguardDict.to_dicts(secrets),
		"allowed_intents": LoreguardDict.to_dicts(allowed_intents),
		"rules": LoreguardRuleSet.flatten(rule_sets),
		"fallbacks": LoreguardFallback.to_wire(fallbacks_by_trigger, fallbacks),
		"few_shot": LoreguardDict.to_dicts(few_shot),
		"ungrounded_numbers": ungrounded_numbers,
		"output_hygiene": output_hygiene,
		"bounds":
		{
			"max_exchanges": max_exchanges,
			"max_episodic": max_episodic,
			"max_beliefs": max_beliefs,
			"max_few_shot": max_few_shot,
			"max_chars": max_chars,
			"belief_threshold": belief_threshold,
		},
		"output_limits":
		{
			"loop_span_words": loop_span_words,
			"ngram_words": ngram_words,
			"max_ngram_repeats": max_ngram_repeats,
			"max_repeated_word_ratio": max_repeated_word_ratio,
			"min_words_for_ratio": min_words_for_ratio,
			"unbalanced_brackets": unbalanced_brackets,
			"ends_mid_word": ends_mid_word,
			"special_tokens": Array(special_tokens),
			"max_copy_similarity": max_copy_similarity,
			"min_copy_words": min_copy_words,
			"max_self_similarity": max_self_similarity,
			"min_repeat_words": min_repeat_words,
			"repeat_window": repeat_window,
		},
	}


## A profile from an `npc.register` body (e.g. the JSON the terminal demo uses). Its rules are
## not part of the profile: read them with `LoreguardRuleSet.from_dicts(id, data["rules"])`.
static func from_dict(data: Dictionary) -> LoreguardNpcProfile:
	var out := LoreguardNpcProfile.new()
	out.id = data.get("id", "")
	out.display_name = data.get("name", "")
	out.persona = data.get("persona", "")
	for fact: Dictionary in data.get("canonical_facts", []):
		out.canonical_facts.append(LoreguardFact.from_dict(fact))
	for secret: Dictionary in data.get("secrets", []):
		out.secrets.append(LoreguardSecret.from_dict(secret))
	for intent: Dictionary in data.get("allowed_intents", []):
		out.allowed_intents.append(LoreguardIntent.from_dict(intent))
	for example: Dictionary in data.get("few_shot", []):
		out.few_shot.append(LoreguardExample.from_dict(example))
	out.ungrounded_numbers = data.get("ungrounded_numbers", out.ungrounded_numbers)
	out.output_hygiene = data.get("output_hygiene", out.output_hygiene)
	out.fallbacks_by_trigger = LoreguardFallback.list_from_wire(data, "NPC %s" % out.id)
	out.fallbacks = LoreguardDict.strings(data.get("fallbacks", {}), "generic")
	# A bound the body leaves out keeps the Resource's default (one place for each default).
	var bounds: Dictionary = data.get("bounds", {})
	out.max_exchanges = int(bounds.get("max_exchanges", out.max_exchanges))
	out.max_episodic = int(bounds.get("max_episodic", out.max_episodic))
	out.max_beliefs = int(bounds.get("max_beliefs", out.max_beliefs))
	out.max_few_shot = int(bounds.get("max_few_shot", out.max_few_shot))
	out.max_chars = int(bounds.get("max_chars", out.max_chars))
	out.belief_threshold = float(bounds.get("belief_threshold", out.belief_threshold))
	var limits: Dictionary = data.get("output_limits", {})
	out.loop_span_words = int(limits.get("loop_span_words", out.loop_span_words))
	out.ngram_words = int(limits.get("ngram_words", out.ngram_words))
	out.max_ngram_repeats = int(limits.get("max_ngram_repeats", out.max_ngram_repeats))
	out.max_repeated_word_ratio = float(limits.get("max_repeated_word_ratio", out.max_repeated_word_ratio))
	out.min_words_for_ratio = int(limits.get("min_words_for_ratio", out.min_words_for_ratio))
	out.unbalanced_brackets = bool(limits.get("unbalanced_brackets", out.unbalanced_brackets))
	out.ends_mid_word = bool(limits.get("ends_mid_word", out.ends_mid_word))
	out.special_tokens = LoreguardDict.strings(limits, "special_tokens")
	out.max_copy_similarity = float(limits.get("max_copy_similarity", out.max_copy_similarity))
	out.min_copy_words = int(limits.get("min_copy_words", out.min_copy_words))
	out.max_self_similarity = float(limits.get("max_self_similarity", out.max_self_similarity))
	out.min_repeat_words = int(limits.get("min_repeat_words", out.min_repeat_words))
	out.repeat_window = int(limits.get("repeat_window", out.repeat_window))
	return out
