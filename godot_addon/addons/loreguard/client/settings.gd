class_name LoreguardSettings
extends RefCounted
## The addon's project settings: names, defaults and inspector hints in one place, read by the
## autoload at run time and registered by the editor plugin. The environment variables
## LOREGUARD_ADDRESS, LOREGUARD_AUTO_LAUNCH, LOREGUARD_REUSE_RUNNING, LOREGUARD_LAUNCH_COMMAND,
## LOREGUARD_MODEL, LOREGUARD_ALLOW_MODEL_DOWNLOAD and LOREGUARD_DEVICE override them (for CI and for running one
## build against different sidecars and models).

const ADDRESS := "loreguard/sidecar/address"
const AUTO_LAUNCH := "loreguard/sidecar/auto_launch"
const LAUNCH_COMMAND := "loreguard/sidecar/launch_command"
## With auto-launch on: use a sidecar already answering on the address although this game did
## not launch it (one you started yourself). Off: such a sidecar may be a stale one from an
## earlier run, so the game launches its own on a free port instead.
const REUSE_RUNNING := "loreguard/sidecar/reuse_running"
const REQUEST_TIMEOUT_MS := "loreguard/sidecar/request_timeout_ms"
## The semantic judge gate of a sidecar the addon launches: auto (the default: on for a catalogue
## model marked judge-capable, 1.5B and up; off for the embedded one), off, keyword (its
## deterministic check) or model (the NPC's own model asked about each reply; the deterministic
## checks decide when it fails or is late).
const JUDGE := "loreguard/sidecar/judge"
const JUDGE_TIMEOUT_MS := "loreguard/sidecar/judge_timeout_ms"
## The dialogue model of a sidecar the addon launches, passed as `--model`: a catalogue name
## (`loreguard models list`), hf:REPO/FILE, a GGUF path, `auto` (the strongest installed model
## that answers in time on the player's machine); empty: the embedded model. A model that
## is not installed is downloaded only with ALLOW_MODEL_DOWNLOAD on; else pull it first
## (`loreguard models pull NAME`).
const MODEL := "loreguard/sidecar/model"
## Let the launched sidecar download a MODEL that is not installed (it gets `--yes`); the status
## shows the download's progress (`downloading_model`). Off by default: a game never downloads
## gigabytes behind the player's back; turn it on for a first run that fetches the model.
const ALLOW_MODEL_DOWNLOAD := "loreguard/sidecar/allow_model_download"
## Where a launched sidecar runs its model, passed as `--device`: auto (the sidecar's default: the
## CPU), cpu, gpu (the first GPU if the player has one, else the CPU: what a shipped game wants),
## or one device such as vulkan:0 or cuda:0. `loreguard devices` lists a machine's.
const DEVICE := "loreguard/sidecar/device"
## Layers offloaded to the GPU when DEVICE names one or is gpu (-1: all), as `--gpu-layers`.
const GPU_LAYERS := "loreguard/sidecar/gpu_layers"

const DEFAULTS := {
	ADDRESS: "tcp://127.0.0.1:7878",
	AUTO_LAUNCH: true,
	LAUNCH_COMMAND: "loreguard serve --port 7878",
	REUSE_RUNNING: false,
	# Generous: a CPU-only model's first answer can take tens of seconds.
	REQUEST_TIMEOUT_MS: 60000,
	JUDGE: "auto",
	JUDGE_TIMEOUT_MS: 3000,
	MODEL: "",
	ALLOW_MODEL_DOWNLOAD: false,
	DEVICE: "auto",
	GPU_LAYERS: -1,
}

const HINTS := {
	ADDRESS: [TYPE_STRING, PROPERTY_HINT_NONE, ""],
	AUTO_LAUNCH: [TYPE_BOOL, PROPERTY_HINT_NONE, ""],
	LAUNCH_COMMAND: [TYPE_STRING, PROPERTY_HINT_NONE, ""],
	REUSE_RUNNING: [TYPE_BOOL, PROPERTY_HINT_NONE, ""],
	REQUEST_TIMEOUT_MS: [TYPE_INT, PROPERTY_HINT_RANGE, "100,600000,100,suffix:ms"],
	JUDGE: [TYPE_STRING, PROPERTY_HINT_ENUM, "auto,off,keyword,model"],
	JUDGE_TIMEOUT_MS: [TYPE_INT, PROPERTY_HINT_RANGE, "100,60000,100,suffix:ms"],
	MODEL: [TYPE_STRING, PROPERTY_HINT_NONE, ""],
	ALLOW_MODEL_DOWNLOAD: [TYPE_BOOL, PROPERTY_HINT_NONE, ""],
	DEVICE: [TYPE_STRING, PROPERTY_HINT_ENUM_SUGGESTION, "auto,cpu,gpu,vulkan:0,cuda:0"],
	GPU_LAYERS: [TYPE_INT, PROPERTY_HINT_RANGE, "-1,512,1"],
}


static func address() -> String:
	return OS.get_environment("LOREGUARD_ADDRESS") if OS.has_environment("LOREGUARD_ADDRESS") else _value(ADDRESS)


static func auto_launch() -> bool:
	if OS.has_environment("LOREGUARD_AUTO_LAUNCH"):
		return OS.get_environment("LOREGUARD_AUTO_LAUNCH") not in ["0", "false", "no", ""]
	return _value(AUTO_LAUNCH)


## The launch command split into program and arguments (on spaces; no shell quoting). Parts
## that start with res:// become file system paths, so a project can name a script beside it.
## With a judge setting other than auto, `--judge MODE` follows (and `--judge-timeout-ms N` when the
## judge is on); with a device other than auto, `--device D` (and `--gpu-layers N`); with a model set,
## `--model M`, and `--yes` when the model may be downloaded.
static func launch_command() -> PackedStringArray:
	var command: String = _value(LAUNCH_COMMAND)
	if OS.has_environment("LOREGUARD_LAUNCH_COMMAND"):
		command = OS.get_environment("LOREGUARD_LAUNCH_COMMAND")
	var out := PackedStringArray()
	for part in command.split(" ", false):
		out.append(ProjectSettings.globalize_path(part) if part.begins_with("res://") else part)
	if not out.is_empty():
		out.append_array(judge_arguments())
		out.append_array(device_arguments())
	var chosen := model()
	if chosen != "" and not out.is_empty():
		out.append_array(["--model", chosen])
		if allow_model_download():
			out.append("--yes")
	return out


## `--judge MODE`, and `--judge-timeout-ms N` with the judge on; nothing for auto (the sidecar's
## own default).
static func judge_arguments() -> PackedStringArray:
	var judge := str(_value(JUDGE))
	if judge == "auto":
		return PackedStringArray()
	if judge == "off":
		return PackedStringArray(["--judge", "off"])
	return PackedStringArray(["--judge", judge, "--judge-timeout-ms", str(_value(JUDGE_TIMEOUT_MS))])


## `--device D --gpu-layers N` for a device other than auto (no layers for cpu); nothing for auto.
static func device_arguments() -> PackedStringArray:
	var chosen := device()
	if chosen == "auto":
		return PackedStringArray()
	if chosen == "cpu":
		return PackedStringArray(["--device", "cpu"])
	return PackedStringArray(["--device", chosen, "--gpu-layers", str(int(_value(GPU_LAYERS)))])


## The device setting (LOREGUARD_DEVICE overrides it), trimmed and lower-case; empty means auto.
static func device() -> String:
	var chosen := str(_value(DEVICE))
	if OS.has_environment("LOREGUARD_DEVICE"):
		chosen = OS.get_environment("LOREGUARD_DEVICE")
	chosen = chosen.strip_edges().to_lower()
	return "auto" if chosen == "" else chosen


static func model() -> String:
	return OS.get_environment("LOREGUARD_MODEL") if OS.has_environment("LOREGUARD_MODEL") else str(_value(MODEL))


static func allow_model_download() -> bool:
	if OS.has_environment("LOREGUARD_ALLOW_MODEL_DOWNLOAD"):
		return OS.get_environment("LOREGUARD_ALLOW_MODEL_DOWNLOAD") not in ["0", "false", "no", ""]
	return _value(ALLOW_MODEL_DOWNLOAD)


static func reuse_running() -> bool:
	if OS.has_environment("LOREGUARD_REUSE_RUNNING"):
		return OS.get_environment("LOREGUARD_REUSE_RUNNING") not in ["0", "false", "no", ""]
	return _value(REUSE_RUNNING)


static func request_timeout_ms() -> int:
	return _value(REQUEST_TIMEOUT_MS)


## Adds every setting that is missing, with its default and inspector hint (editor plugin).
static func register() -> void:
	for setting: String in DEFAULTS:
		if not ProjectSettings.has_setting(setting):
			ProjectSettings.set_setting(setting, DEFAULTS[setting])
		ProjectSettings.set_initial_value(setting, DEFAULTS[setting])
		var hint: Array = HINTS[setting]
		ProjectSettings.add_property_info({"name": setting, "type": hint[0], "hint": hint[1], "hint_string": hint[2]})
	LoreguardBundle.register()


static func _value(setting: String) -> Variant:
	return ProjectSettings.get_setting(setting, DEFAULTS[setting])
