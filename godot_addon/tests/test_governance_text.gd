extends "res://tests/check_run.gd"
## LoreguardGovernanceText and LoreguardGovernanceLog on what the sidecar emits, which pytest
## writes to $LOREGUARD_TEST_INPUT (tests/godot_addon/test_governance_text.py): the codes found
## in the sidecar's source, failures its checks made, and the replies of a governance-heavy
## streamed session. Prints each failure's phrase for a person to read.

const WORDS := preload("res://addons/loreguard/display/governance_text.gd")

var given: Dictionary = {}


func _init() -> void:
	given = JSON.parse_string(FileAccess.get_file_as_string(OS.get_environment("LOREGUARD_TEST_INPUT")))
	_test_every_code_has_words()
	_test_failures_read_as_phrases()
	_test_examples()
	_test_unknown_codes_show_themselves()
	_test_attempts()
	await _test_log()
	_finish()


func _test_every_code_has_words() -> void:
	var codes: Dictionary = given["codes"]
	var tables := {
		"gates": WORDS.GATES,
		"built_in_rules": WORDS.BUILT_IN_RULES,
		"fallback_sources": WORDS.FALLBACK_SOURCES,
		"give_ups": WORDS.GIVE_UPS,
		"triggers": WORDS.TRIGGERS,
		"outcomes": WORDS.OUTCOMES,
	}
	for kind: String in tables:
		for code: String in codes[kind]:
			_expect((tables[kind] as Dictionary).has(code), "%s: %s has plain words" % [kind, code])
	for code: String in codes["gates"]:
		_expect(WORDS.GATES_SHORT.has(code), "gates: %s has a short name" % code)


func _test_failures_read_as_phrases() -> void:
	for failure: Dictionary in given["failures"]:
		var phrase := WORDS.failure(failure)
		print("%s | %s  =>  %s" % [failure["rule_id"], failure["reason"], phrase])
		_expect(phrase.ends_with(" [%s]" % failure["rule_id"]), "the rule's id in brackets", phrase)
		_expect(WORDS.failure_phrase(failure) != failure["reason"], "plain words, not the reason", phrase)


func _test_examples() -> void:
	var dragon := {"gate": "constraints", "reason": 'forbidden phrase "dragon"', "rule_id": "no_dragon"}
	_expect(
		WORDS.failure(dragon) == "said a forbidden word: dragon [no_dragon]", "a forbidden word", WORDS.failure(dragon)
	)
	var exhausted := WORDS.fallback("attempts_exhausted -> npc_trigger", "Brom", "player_utterance")
	var want := "every attempt was refused; used Brom's authored line for a player's question [npc_trigger]"
	_expect(exhausted == want, "attempts exhausted", exhausted)
	var critical := WORDS.fallback("critical: reveals secret password -> npc_trigger", "Brom")
	_expect(
		critical.begins_with("a critical rule was broken") and critical.ends_with("[npc_trigger]"),
		"critical",
		critical
	)
	var world := WORDS.fallback("time_budget -> world_generic", "Brom")
	_expect(
		world == "it ran out of time for another attempt; used the world's general fallback line [world_generic]",
		world
	)
	var down := WORDS.fallback("backend: model crashed -> emergency", "Brom")
	_expect(down.begins_with("the model could not answer (model crashed); used the world's emergency line"), down)
	_expect(WORDS.outcome("validated", 1) == "its own line passed first time", "outcome, first time")
	_expect(WORDS.outcome("validated", 3) == "its own line passed on attempt 3", "outcome, third attempt")
	var cut_attempt := {"stream": {"cut": {"released_chars": 42, "reason": "gate"}}}
	_expect(
		(
			WORDS.outcome_of({"outcome": "validated", "attempts": [{}, {}, cut_attempt]})
			== "its own line passed on attempt 3, cut short where a check stopped it"
		),
		"an outcome whose spoken attempt was stopped mid-line says so"
	)
	_expect(
		WORDS.outcome_of({"outcome": "validated", "attempts": [{}, {}]}) == "its own line passed on attempt 2",
		"and one that was not, does not"
	)
	_expect(WORDS.intent("give_item", {"item": "lantern", "count": 1}) == "give_item(count=1, item=lantern)", "intent")
	var canon := WORDS.rejected_change("canonical:king is a canonical fact")
	_expect(canon == "tried to change a fact of the world: canonical:king", "a refused change", canon)
	var said_no := WORDS.rejected_change('the reply turns it down ("not allowed")')
	_expect(said_no == 'granted it while saying no ("not allowed")', "a grant the words refused", said_no)
	var retry := {"gate": "semantic", "reason": "keyword judge: mentions dragon", "rule_id": "retry.no_dragon.ab12"}
	_expect(WORDS.failure(retry).begins_with("said again something already refused"), "a retry's own rule")


## A code the addon does not know yet is shown as itself, never as nothing.
func _test_unknown_codes_show_themselves() -> void:
	_expect(WORDS.gate("future_gate") == "future_gate", "an unknown gate")
	var odd := {"gate": "future_gate", "reason": "", "rule_id": null}
	_expect(WORDS.failure(odd) == "future_gate [future_gate]", "an unknown failure", WORDS.failure(odd))
	var told := {"gate": "constraints", "reason": "a reason from a newer sidecar", "rule_id": "r9"}
	_expect(WORDS.failure(told) == "a reason from a newer sidecar [r9]", "an unknown reason", WORDS.failure(told))
	_expect(not WORDS.failure({}).is_empty(), "an empty failure is not blank", WORDS.failure({}))
	var fallback := WORDS.fallback("new_reason -> new_source", "Brom")
	_expect(fallback.contains("new_reason") and fallback.ends_with("[new_source]"), "an unknown fallback", fallback)
	_expect(not WORDS.fallback("", "Brom").is_empty(), "no fallback reason is not blank")
	_expect(
		WORDS.trigger("new_trigger") == "new_trigger" and WORDS.outcome("new", 1) == "new", "unknown trigger, outcome"
	)


func _test_attempts() -> void:
	var first: Dictionary = given["replies"][0]["receipt"]
	var cut: Dictionary = first["attempts"][0]
	var ending := WORDS.attempt_ending(cut, false)
	_expect(
		ending == "stopped mid-line by the designer's rules, before anything was shown",
		"a cut attempt's ending",
		ending
	)
	_expect(
		WORDS.attempt_text(cut) == "They say a dragon was seen in the hills.",
		"a cut attempt's text",
		WORDS.attempt_text(cut)
	)
	_expect(WORDS.attempt_ending(first["attempts"][1], true) == "passed every check", "the used attempt")
	_expect(WORDS.attempt_used(first, 1) and not WORDS.attempt_used(first, 0), "which attempt was used")
	var unreadable := {
		"attempt": 1,
		"raw_output": "Sure! Here is my reply",
		"parse_path": "failed",
		"failures":
		[{"gate": "schema", "reason": "no JSON object found in the model output", "rule_id": "output_schema"}],
		"stream": null,
	}
	_expect(WORDS.attempt_ending(unreadable, false) == "could not be read (parse failed)", "a parse failure")
	_expect(WORDS.attempt_text(unreadable) == "Sure! Here is my reply", "its raw text")
	var repaired := {"attempt": 1, "raw_output": "", "cut_to": 33, "failures": [{"gate": "knowledge", "reason": "x"}]}
	var repaired_ending := WORDS.attempt_ending(repaired, true)
	_expect(repaired_ending.contains("first 33 characters passed"), "a reply cut back", repaired_ending)
	var kept_out := {
		"prevented":
		[
			{"rule_id": "no_dragon", "evidence": "dragon", "refused": 2},
			{"rule_id": "assistant_register", "evidence": "\\bassist\\b", "refused": 1},
		]
	}
	var in_words := WORDS.attempt_prevented(kept_out)
	_expect(in_words.size() == 2, "what was kept out", str(in_words))
	_expect(in_words[0] == "“dragon” (no_dragon, 2 tokens refused)", "a phrase in its words", str(in_words))
	_expect(in_words[1].begins_with("a phrase (assistant_register"), "a pattern by its rule", str(in_words))
	_expect(WORDS.attempt_prevented({}).is_empty(), "nothing kept out")
	var spoken := {"attempt": 2, "raw_output": "", "stream": {"cut": {"released_chars": 27, "reason": "x"}}}
	_expect(WORDS.attempt_ending(spoken, true).contains("the 27 characters already shown stand"), "a cut, used reply")


func _test_log() -> void:
	var view := LoreguardGovernanceLog.new()
	view.size = Vector2(420, 600)
	root.add_child(view)
	var names := {"guard": "Brom", "merchant": "Mira"}
	for i in given["replies"].size():
		var line := LoreguardLine.from_reply(given["replies"][i])
		view.add_line(i + 1, line, names[line.npc_id], 1000 + i)
	var text := view.get_parsed_text()
	print(text)
	_expect(view.entry_count() == 5, "one entry per line")
	for words in [
		"#1 Brom · its own line passed on attempt 2 · 1000 ms",
		"attempt 1: stopped mid-line by the designer's rules, before anything was shown",
		"said a forbidden word: dragon [no_dragon]",
		"attempt 2: passed every check",
		"#2 Brom · refused; an authored line was spoken instead",
		"fallback: a critical rule was broken, so it was not tried again; used Brom's authored line for a player's question",
		"#3 Mira · its own line passed first time",
		"approved action: give_item(count=1, item=lantern)",
		"every attempt was refused; used the line authored for what the rules decided [deal_lines]",
		"approved action: give_item(count=1, item=lantern) for 5 silver",
		"decided by the rules: sold (sells 1 lantern for 5 silver)",
		"decided by the rules: no sale (the player has 7 silver, and 2 lanterns cost 10 silver)",
	]:
		_expect(text.contains(words), "the log says: " + words, text)
	# One paragraph per attempt, each once, however many reasons it had.
	_expect(text.count("attempt 1:") == 3 and text.count("attempt 3:") == 1, "each attempt listed once")
	var first := LoreguardLine.from_reply(given["replies"][0])
	var bbcode := view.entry_bbcode({"number": 1, "npc": "Brom", "line": first, "latency_ms": 1, "trigger": ""})
	_expect(bbcode.contains("[indent]") and bbcode.contains("[ul]"), "reasons are indented blocks, not leading spaces")
	_expect(not text.contains("They say a dragon"), "what a refused attempt said starts folded")
	view.meta_clicked.emit("said:1:1")
	_expect(view.get_parsed_text().contains("“They say a dragon was seen in the hills.”"), "a click unfolds it")
	view.meta_clicked.emit("said:1:1")
	_expect(not view.get_parsed_text().contains("They say a dragon"), "a second click folds it")
	var clicked: Array[int] = []
	view.line_clicked.connect(func(number: int) -> void: clicked.append(number))
	view.meta_clicked.emit("line:3")
	_expect(clicked == [3], "the entry's number asks for its line", str(clicked))
	await process_frame
	_expect(view.get_content_width() <= view.size.x, "the text wraps inside the log")
	view.queue_free()
