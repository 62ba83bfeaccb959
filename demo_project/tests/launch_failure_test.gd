extends Node
## A sidecar that cannot start (its command exits at once): the autoload restarts it a bounded
## number of times with backoff, then reports `failed` with the sidecar's own last log line, and
## a line said after that fails at once with `sidecar_down` (tests/godot_addon/test_supervision.py).

const WATCHDOG_S := 150.0

var _statuses: PackedStringArray = []

@onready var _loreguard: LoreguardClient = get_node("/root/Loreguard")
@onready var _guard: LoreguardNPC = $Main/Guard


func _ready() -> void:
	get_tree().create_timer(WATCHDOG_S).timeout.connect(func() -> void: get_tree().quit(2))
	_loreguard.status_changed.connect(
		func(s: LoreguardSidecarStatus) -> void:
			if s.state == LoreguardSidecarStatus.State.RESTARTING:
				_statuses.append("restarting %d/%d" % [s.attempt, s.max_attempts])
	)
	while _loreguard.status.state != LoreguardSidecarStatus.State.FAILED:
		await get_tree().process_frame
	print("launch_failure: ", ", ".join(_statuses))
	print("launch_failure: failed: ", _loreguard.status.reason)
	print("launch_failure: player sees: ", _loreguard.status.describe())
	var started := Time.get_ticks_msec()
	var result := await _guard.say("Hello?")
	var code := result.error.code if not result.ok else "ok"
	print("launch_failure: a line after that: %s after %d ms" % [code, Time.get_ticks_msec() - started])
	get_tree().quit(0)
