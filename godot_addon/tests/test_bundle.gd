extends "res://tests/check_run.gd"
## LoreguardBundle: the bundle's launch command and the hello version check
## (tests/godot_addon/test_bundle_launch.py runs this and the launch probe).


func _init() -> void:
	_test_relative_path_is_beside_the_executable()
	_test_launch_command()
	_test_version_check()
	_finish()


func _test_relative_path_is_beside_the_executable() -> void:
	ProjectSettings.set_setting(LoreguardBundle.BUNDLE_PATH, "sidecar/loreguard-sidecar")
	var want := OS.get_executable_path().get_base_dir().path_join("sidecar/loreguard-sidecar")
	_expect(LoreguardBundle.folder() == want, "relative bundle path", LoreguardBundle.folder())
	ProjectSettings.set_setting(LoreguardBundle.BUNDLE_PATH, "/opt/game/loreguard-sidecar")
	_expect(
		LoreguardBundle.folder() == "/opt/game/loreguard-sidecar", "absolute bundle path", LoreguardBundle.folder()
	)


func _test_launch_command() -> void:
	ProjectSettings.set_setting(LoreguardSettings.JUDGE, "auto")
	var command := LoreguardBundle.launch_command("/opt/game/loreguard-sidecar", "tcp://127.0.0.1:7901")
	var exe := "/opt/game/loreguard-sidecar/loreguard-sidecar" + (".exe" if OS.get_name() == "Windows" else "")
	var data := ProjectSettings.globalize_path(LoreguardBundle.DATA_DIR)
	_expect(
		command == PackedStringArray([exe, "serve", "--port", "7901", "--data", data]), "bundle command", str(command)
	)
	ProjectSettings.set_setting(LoreguardSettings.JUDGE, "keyword")
	ProjectSettings.set_setting(LoreguardBundle.BUNDLE_ARGUMENTS, "--gpu-layers -1")
	command = LoreguardBundle.launch_command("/opt/game/loreguard-sidecar", "tcp://127.0.0.1:7901")
	var want := PackedStringArray(["--gpu-layers", "-1", "--judge", "keyword", "--judge-timeout-ms", "3000"])
	_expect(command.slice(6) == want, "bundle arguments, then judge flags", str(command))


func _test_version_check() -> void:
	var same := {"server": "loreguard " + LoreguardBundle.ADDON_VERSION}
	_expect(LoreguardBundle.version_problem(same).is_empty(), "same version")
	var other := LoreguardBundle.version_problem({"server": "loreguard 9.9.9"})
	_expect("loreguard 9.9.9" in other and LoreguardBundle.ADDON_VERSION in other, "other version", other)
