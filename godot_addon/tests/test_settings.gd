extends "res://tests/check_run.gd"
## LoreguardSettings.launch_command(): the project's command, res:// parts made absolute, the judge
## flags only when the judge setting is not auto, and `--model` only when a model is set
## (tests/godot_addon/test_settings.py).


func _init() -> void:
	_test_judge_auto_adds_nothing()
	_test_judge_off_says_so()
	_test_judge_on_adds_its_flags()
	_test_model_adds_its_flag()
	_test_allowed_download_adds_yes()
	_finish()


func _test_judge_auto_adds_nothing() -> void:
	ProjectSettings.set_setting(LoreguardSettings.LAUNCH_COMMAND, "loreguard serve --port 7999")
	ProjectSettings.set_setting(LoreguardSettings.JUDGE, "auto")
	var command := LoreguardSettings.launch_command()
	_expect(command == PackedStringArray(["loreguard", "serve", "--port", "7999"]), "judge auto", str(command))


func _test_judge_off_says_so() -> void:
	ProjectSettings.set_setting(LoreguardSettings.LAUNCH_COMMAND, "loreguard serve")
	ProjectSettings.set_setting(LoreguardSettings.JUDGE, "off")
	var command := LoreguardSettings.launch_command()
	_expect(command == PackedStringArray(["loreguard", "serve", "--judge", "off"]), "judge off", str(command))


func _test_judge_on_adds_its_flags() -> void:
	ProjectSettings.set_setting(LoreguardSettings.LAUNCH_COMMAND, "loreguard serve")
	ProjectSettings.set_setting(LoreguardSettings.JUDGE, "model")
	ProjectSettings.set_setting(LoreguardSettings.JUDGE_TIMEOUT_MS, 1500)
	var command := LoreguardSettings.launch_command()
	var want := PackedStringArray(["loreguard", "serve", "--judge", "model", "--judge-timeout-ms", "1500"])
	_expect(command == want, "judge on", str(command))


func _test_model_adds_its_flag() -> void:
	ProjectSettings.set_setting(LoreguardSettings.LAUNCH_COMMAND, "loreguard serve")
	ProjectSettings.set_setting(LoreguardSettings.JUDGE, "auto")
	ProjectSettings.set_setting(LoreguardSettings.MODEL, "llama-3.2-3b")
	var command := LoreguardSettings.launch_command()
	var want := PackedStringArray(["loreguard", "serve", "--model", "llama-3.2-3b"])
	_expect(command == want, "model set", str(command))
	ProjectSettings.set_setting(LoreguardSettings.MODEL, "")


func _test_allowed_download_adds_yes() -> void:
	ProjectSettings.set_setting(LoreguardSettings.LAUNCH_COMMAND, "loreguard serve")
	ProjectSettings.set_setting(LoreguardSettings.ALLOW_MODEL_DOWNLOAD, true)
	var command := LoreguardSettings.launch_command()
	_expect(command == PackedStringArray(["loreguard", "serve"]), "no model: no --yes", str(command))
	ProjectSettings.set_setting(LoreguardSettings.MODEL, "qwen2.5-3b")
	command = LoreguardSettings.launch_command()
	var want := PackedStringArray(["loreguard", "serve", "--model", "qwen2.5-3b", "--yes"])
	_expect(command == want, "download allowed", str(command))
	ProjectSettings.set_setting(LoreguardSettings.ALLOW_MODEL_DOWNLOAD, false)
	ProjectSettings.set_setting(LoreguardSettings.MODEL, "")
