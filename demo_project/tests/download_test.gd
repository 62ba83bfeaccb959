extends Node
## The demo scene while its launched sidecar downloads the model it was given (LOREGUARD_MODEL,
## LOREGUARD_ALLOW_MODEL_DOWNLOAD): prints each status the autoload emitted with the status label's
## text, until the sidecar is ready or the autoload gave up (tests/godot_addon/test_model_download.py).

const WATCHDOG_S := 240.0

@onready var _loreguard: LoreguardClient = get_node("/root/Loreguard")
@onready var _status: Label = $Main.get_node("%Status")


func _ready() -> void:
	get_tree().create_timer(WATCHDOG_S).timeout.connect(func() -> void: get_tree().quit(2))
	_loreguard.status_changed.connect(_print_status)
	var ended := [LoreguardSidecarStatus.State.READY, LoreguardSidecarStatus.State.FAILED]
	while _loreguard.status.state not in ended:
		await _loreguard.status_changed
	print("download: ended %s: %s" % [_loreguard.status.state_name(), _loreguard.status.reason])
	print("download: problem: ", _loreguard.problem)
	get_tree().quit(0)


# The demo's own handler ran first (it connected in its _ready), so the label shows this status.
func _print_status(status: LoreguardSidecarStatus) -> void:
	var fraction := (
		status.download_fraction() if status.state == LoreguardSidecarStatus.State.DOWNLOADING_MODEL else -1.0
	)
	print("download: status %s %.3f | %s" % [status.state_name(), fraction, _status.text])
