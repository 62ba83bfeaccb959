extends Node
## The supervised sidecar, as a player meets it: the demo scene talks to a sidecar the autoload
## launched, the sidecar is killed with SIGKILL while Brom is answering, and the line must fail
## at once with `sidecar_down`, the sidecar must be back, the next line must work, and every
## acknowledged memory write must still be there (tests/godot_addon/test_supervision.py).
##
##     godot --headless --path demo_project res://tests/supervision.tscn

const WATCHDOG_S := 120.0
## The goals of issue 19: a clear message within 2 s, the sidecar back within 10 s.
const DOWN_GOAL_MS := 2000
const BACK_GOAL_MS := 10000
## Generous waits for events on a loaded CI machine (the goals above are checked separately).
const WAIT_S := 60.0

var passed: int = 0
var failed: int = 0
var _statuses: PackedStringArray = []

@onready var _loreguard: LoreguardClient = get_node("/root/Loreguard")
@onready var _guard: LoreguardNPC = $Main/Guard


func _ready() -> void:
	get_tree().create_timer(WATCHDOG_S).timeout.connect(
		func() -> void:
			printerr("supervision: watchdog fired after %d s" % WATCHDOG_S)
			get_tree().quit(2)
	)
	_loreguard.status_changed.connect(func(s: LoreguardSidecarStatus) -> void: _statuses.append(s.state_name()))
	await _play()
	print("supervision: statuses seen: ", ", ".join(_dedupe(_statuses)))
	print("supervision: %d passed, %d failed" % [passed, failed])
	get_tree().quit(0 if failed == 0 else 1)


func _play() -> void:
	await _until(_is_ready, WAIT_S)
	_expect(_is_ready(), "the launched sidecar became ready", str(_loreguard.status))
	await _until(func() -> bool: return _guard.is_registered, WAIT_S)
	var first := await _guard.say("Good evening.")
	_expect(first.ok, "a first line before the kill", str(first.error))
	var state := await _loreguard.set_state({"quest.kill_test": "acknowledged"})
	_expect(state.ok, "a world-state write before the kill", str(state.error))
	var before := await _loreguard.memory("guard")
	_expect(before.ok, "memory before the kill", str(before.error))

	var pid := _loreguard.launched_pid
	var outcome := {}
	_say_into("Is the gate open tonight?", outcome)
	await _until(func() -> bool: return _loreguard._requests.has_in_flight(), WAIT_S)
	var killed_at := Time.get_ticks_msec()
	# From outside, as a crash or `kill -9` would (OS.kill would also reap it for the game).
	OS.execute("kill", ["-KILL", str(pid)])
	await _until(func() -> bool: return outcome.has("result"), WAIT_S)
	var down_ms := Time.get_ticks_msec() - killed_at
	var lost: LoreguardResult = outcome.get("result")
	_expect(
		lost != null and not lost.ok and lost.error.code == LoreguardError.SIDECAR_DOWN,
		"the line in flight failed with sidecar_down",
		str(lost.error if lost != null else null)
	)
	_expect(down_ms <= DOWN_GOAL_MS, "sidecar_down within %d ms" % DOWN_GOAL_MS, "took %d ms" % down_ms)
	await _until(func() -> bool: return _loreguard.status.state != LoreguardSidecarStatus.State.READY, WAIT_S)
	await _until(_is_ready, WAIT_S)
	var back_ms := Time.get_ticks_msec() - killed_at
	_expect(_is_ready(), "the sidecar came back", str(_loreguard.status))
	_expect(back_ms <= BACK_GOAL_MS, "back within %d ms" % BACK_GOAL_MS, "took %d ms" % back_ms)
	_expect(_loreguard.launched_pid > 0 and _loreguard.launched_pid != pid, "a new sidecar process")
	print("supervision: sidecar_down after %d ms, ready again after %d ms" % [down_ms, back_ms])

	var next := await _guard.say("Good evening again.")
	_expect(next.ok, "the next line works", str(next.error))
	var after := await _loreguard.memory("guard")
	_expect(after.ok, "memory after the restart", str(after.error))
	if before.ok and after.ok:
		_expect_kept(before.body, after.body)


## Every episodic entry and world-state value acknowledged before the kill is still there.
func _expect_kept(before: Dictionary, after: Dictionary) -> void:
	for scope in ["memory", "world"]:
		for kind in ["episodic", "world_state"]:
			var now: Array = after[scope][kind]
			for entry: Dictionary in before[scope][kind]:
				_expect(entry in now, "kept %s %s" % [scope, kind], str(entry))
	_expect(int(after["interactions"]) >= int(before["interactions"]) + 1, "the interaction count went on")
	var state_keys := (after["world"]["world_state"] as Array).map(func(e: Dictionary) -> String: return e["key"])
	_expect("quest.kill_test" in state_keys, "the acknowledged world-state key is there", str(state_keys))


func _say_into(text: String, outcome: Dictionary) -> void:
	outcome["result"] = await _guard.say(text)


func _is_ready() -> bool:
	return _loreguard.status.state == LoreguardSidecarStatus.State.READY


func _expect(condition: bool, what: String, detail: String = "") -> void:
	if condition:
		passed += 1
	else:
		failed += 1
		printerr("supervision: FAIL %s %s" % [what, detail])


func _dedupe(names: PackedStringArray) -> PackedStringArray:
	var out := PackedStringArray()
	for name in names:
		if out.is_empty() or out[out.size() - 1] != name:
			out.append(name)
	return out


func _until(condition: Callable, timeout_s: float) -> void:
	var deadline := Time.get_ticks_msec() + int(timeout_s * 1000)
	while not condition.call() and Time.get_ticks_msec() < deadline:
		await get_tree().process_frame
