extends Node
## The demo scene until its launched sidecar is ready, then idle: a driver kills this game (as
## the editor's Stop button does, with SIGKILL) and checks the sidecar exits by itself
## (tests/godot_addon/test_supervision.py).

@onready var _loreguard: LoreguardClient = get_node("/root/Loreguard")


func _ready() -> void:
	while _loreguard.status.state != LoreguardSidecarStatus.State.READY:
		await get_tree().process_frame
	print("wait_ready: sidecar pid %d at %s" % [_loreguard.launched_pid, _loreguard.address])
