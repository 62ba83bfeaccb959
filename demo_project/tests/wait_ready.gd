extends Node
## The demo scene until its launched sidecar is ready, then idle: a driver kills this game (as
## the editor's Stop button does, with SIGKILL) and checks the sidecar exits by itself
## (tests/godot_addon/test_supervision.py). With LOREGUARD_TEST_QUIT set, it quits as a player's
## game does once ready, and the driver checks the sidecar shut down cleanly.

@onready var _loreguard: LoreguardClient = get_node("/root/Loreguard")


func _ready() -> void:
	while _loreguard.status.state != LoreguardSidecarStatus.State.READY:
		await get_tree().process_frame
	print("wait_ready: sidecar pid %d at %s" % [_loreguard.launched_pid, _loreguard.address])
	if not OS.get_environment("LOREGUARD_TEST_QUIT").is_empty():
		get_tree().quit()
