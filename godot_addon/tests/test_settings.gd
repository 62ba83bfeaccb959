extends "res://tests/check_run.gd"
## LoreguardSettings.launch_command(): the project's command, res:// parts made absolute, the judge
## flags only when the judge setting is not auto, `--device` only when the device is not auto,
## and `--model` only when a model is set (tests/godot_addon/test_settings.py).


func _init() -> void:
	_test_judge_auto_adds_nothing()
	_test_judge_off_says_so()
	_test_judge_on_adds_its_flags()
	_test_model_adds_its_flag()
	_test_allowed_download_adds_yes()
	_test_device_auto_adds_nothing_and_a_gpu_adds_its_layers()
	_test_hello_says_where_the_model_runs()
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


func _test_device_auto_adds_nothing_and_a_gpu_adds_its_layers() -> void:
	ProjectSettings.set_setting(LoreguardSettings.LAUNCH_COMMAND, "loreguard serve")
	ProjectSettings.set_setting(LoreguardSettings.JUDGE, "auto")
	var want := {
		"auto": PackedStringArray(["loreguard", "serve"]),
		"CPU": PackedStringArray(["loreguard", "serve", "--device", "cpu"]),
		"gpu": PackedStringArray(["loreguard", "serve", "--device", "gpu", "--gpu-layers", "-1"]),
		"vulkan:0": PackedStringArray(["loreguard", "serve", "--device", "vulkan:0", "--gpu-layers", "-1"]),
	}
	for device: String in want:
		ProjectSettings.set_setting(LoreguardSettings.DEVICE, device)
		var command := LoreguardSettings.launch_command()
		_expect(command == want[device], "device " + device, str(command))
	ProjectSettings.set_setting(LoreguardSettings.GPU_LAYERS, 20)
	var layers := LoreguardSettings.launch_command()
	_expect(layers.slice(-2) == PackedStringArray(["--gpu-layers", "20"]), "gpu layers", str(layers))
	ProjectSettings.set_setting(LoreguardSettings.GPU_LAYERS, -1)
	ProjectSettings.set_setting(LoreguardSettings.DEVICE, "auto")


func _test_hello_says_where_the_model_runs() -> void:
	var extra := {"device": "vulkan:0", "device_name": "AMD Radeon RX 7600", "offloaded_layers": 31}
	var on_gpu := LoreguardSidecarStatus.device_of({"model": {"extra": extra}})
	_expect(on_gpu == "vulkan:0 (AMD Radeon RX 7600, 31 layers)", "device from hello", on_gpu)
	var on_cpu := LoreguardSidecarStatus.device_of({"model": {"extra": {"device": "cpu"}}})
	_expect(on_cpu == "the CPU", "cpu from hello", on_cpu)
	_expect(LoreguardSidecarStatus.device_of({"model": null}) == "", "no model", "")
