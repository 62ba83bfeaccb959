class_name LoreguardBundle
extends RefCounted
## Where the sidecar comes from: the developer's `launch_command` in the editor, the frozen bundle
## (`loreguard bundle`) beside the exported game everywhere else. Before a bundle is launched its
## `bundle.json` is checked, so a missing bundle, one built for another platform or version, or
## one whose model file is gone is one clear status line instead of a silent retry loop.

## The addon's version; plugin.cfg says the same (tests/test_versions.py checks both and the
## sidecar's). A constant, because an exported game does not carry plugin.cfg.
const ADDON_VERSION := "0.1.0"

## The bundle folder: relative to the exported game's executable folder, or absolute.
const BUNDLE_PATH := "loreguard/sidecar/bundle_path"
## auto: the launch command in the editor, the bundle in an exported game; or always one of them.
const LAUNCH_MODE := "loreguard/sidecar/launch_mode"
## Extra arguments for the bundle's `serve`, split on spaces (the device is its own setting,
## loreguard/sidecar/device).
const BUNDLE_ARGUMENTS := "loreguard/sidecar/bundle_arguments"
const EXECUTABLE := "loreguard-sidecar"
const MANIFEST := "bundle.json"
## Where a bundled sidecar keeps memory and audit records on the player's machine.
const DATA_DIR := "user://loreguard-data"

const DEFAULTS := {BUNDLE_PATH: "loreguard-sidecar", LAUNCH_MODE: "auto", BUNDLE_ARGUMENTS: ""}
const HINTS := {
	BUNDLE_PATH: [TYPE_STRING, PROPERTY_HINT_NONE, ""],
	BUNDLE_ARGUMENTS: [TYPE_STRING, PROPERTY_HINT_NONE, ""],
	LAUNCH_MODE: [TYPE_STRING, PROPERTY_HINT_ENUM, "auto,command,bundle"],
}


## True when the sidecar to launch is the bundle (LOREGUARD_LAUNCH_MODE overrides the setting).
static func in_use() -> bool:
	var mode := _setting(LAUNCH_MODE, "LOREGUARD_LAUNCH_MODE")
	if mode == "auto":
		return not OS.has_feature("editor")
	return mode == "bundle"


## The bundle's folder (LOREGUARD_BUNDLE_PATH overrides the setting).
static func folder() -> String:
	var path := _setting(BUNDLE_PATH, "LOREGUARD_BUNDLE_PATH")
	if path.is_absolute_path():
		return path.simplify_path()
	return OS.get_executable_path().get_base_dir().path_join(path).simplify_path()


## `loreguard-sidecar serve --port N --data <user://loreguard-data>` inside `at`, then the
## bundle arguments and the judge options the launch command would get.
static func launch_command(at: String, address: String) -> PackedStringArray:
	var executable := at.path_join(EXECUTABLE + (".exe" if OS.get_name() == "Windows" else ""))
	var port := address.get_slice(":", address.get_slice_count(":") - 1)
	var data := ProjectSettings.globalize_path(DATA_DIR)
	var out := PackedStringArray([executable, "serve", "--port", port, "--data", data])
	out.append_array(str(ProjectSettings.get_setting(BUNDLE_ARGUMENTS, "")).split(" ", false))
	out.append_array(LoreguardSettings.judge_arguments())
	out.append_array(LoreguardSettings.device_arguments())
	return out


## Why the bundle at `at` cannot run on this machine with this addon, or "" when it can.
static func problem(at: String) -> String:
	var manifest_path := at.path_join(MANIFEST)
	if not FileAccess.file_exists(manifest_path):
		return (
			"no sidecar bundle at %s: build it with `loreguard bundle` and put it beside the game (docs/shipping.md)"
			% at
		)
	var manifest: Variant = JSON.parse_string(FileAccess.get_file_as_string(manifest_path))
	if not manifest is Dictionary:
		return "the sidecar bundle's %s is not readable JSON" % manifest_path
	var here := "%s-%s" % [_os_name(), Engine.get_architecture_name()]
	var built_for := "%s-%s" % [manifest.get("os", "?"), manifest.get("arch", "?")]
	if built_for != here:
		return (
			"the sidecar bundle at %s is built for %s, this machine is %s: ship the bundle built on %s"
			% [at, built_for, here, here]
		)
	if str(manifest.get("loreguard", "?")) != ADDON_VERSION:
		return (
			"the sidecar bundle at %s is Loreguard %s, the addon is %s: rebuild it with `loreguard bundle`"
			% [at, manifest.get("loreguard", "?"), ADDON_VERSION]
		)
	var executable := at.path_join(str(manifest.get("executable", EXECUTABLE)))
	if not FileAccess.file_exists(executable):
		return "the sidecar bundle at %s has no executable %s" % [at, executable.get_file()]
	var model: Variant = manifest.get("model")
	if model is String and not FileAccess.file_exists(at.path_join(model)):
		return "the sidecar bundle at %s is missing its model %s" % [at, model]
	if str(manifest.get("accelerator", "cpu")) == "vulkan" and not has_vulkan_loader():
		return (
			(
				"the sidecar bundle at %s is the Vulkan build, and this machine has no Vulkan loader (%s): "
				+ "install the GPU driver, or ship the CPU bundle (docs/gpu.md)"
			)
			% [at, _vulkan_loader_name()]
		)
	return ""


## Whether the system's Vulkan loader, which every GPU driver installs and the Vulkan bundle
## links against, is where the system's dynamic linker finds it: the usual folders, then the
## linker's own cache (`ldconfig -p`). When neither can be asked, it is assumed there: the check
## exists to explain a launch that would fail, never to stop one that would not.
static func has_vulkan_loader() -> bool:
	var name := _vulkan_loader_name()
	match OS.get_name():
		"Windows":
			return FileAccess.file_exists(OS.get_environment("SystemRoot").path_join("System32").path_join(name))
		"macOS":
			return true  # a macOS bundle is the Metal or CPU build
	var folders := PackedStringArray(
		["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"]
	)
	folders.append_array(OS.get_environment("LD_LIBRARY_PATH").split(":", false))
	for folder in folders:
		if FileAccess.file_exists(folder.path_join(name)):
			return true
	for ldconfig: String in ["/sbin/ldconfig", "/usr/sbin/ldconfig", "/usr/bin/ldconfig"]:
		if FileAccess.file_exists(ldconfig):
			var output := []
			if OS.execute(ldconfig, PackedStringArray(["-p"]), output) != 0:
				return true
			return name in "".join(output)
	return true


static func _vulkan_loader_name() -> String:
	return "vulkan-1.dll" if OS.get_name() == "Windows" else "libvulkan.so.1"


## Why a sidecar that answered `hello` with `body` does not match this addon, or "" (also when
## the reply names no server, as test doubles do).
static func version_problem(body: Dictionary) -> String:
	var server := str(body.get("server", "loreguard " + ADDON_VERSION))
	if server == "loreguard " + ADDON_VERSION:
		return ""
	return "the sidecar is %s but the addon is loreguard %s: use the same version of both" % [server, ADDON_VERSION]


## Adds the launch settings that are missing, with defaults and inspector hints (editor plugin).
static func register() -> void:
	for setting: String in DEFAULTS:
		if not ProjectSettings.has_setting(setting):
			ProjectSettings.set_setting(setting, DEFAULTS[setting])
		ProjectSettings.set_initial_value(setting, DEFAULTS[setting])
		var hint: Array = HINTS[setting]
		ProjectSettings.add_property_info({"name": setting, "type": hint[0], "hint": hint[1], "hint_string": hint[2]})


# The names `loreguard bundle` writes into bundle.json (server/shipping/platform_tag.py).
static func _os_name() -> String:
	match OS.get_name():
		"Windows":
			return "windows"
		"macOS":
			return "macos"
		_:
			return OS.get_name().to_lower()


static func _setting(setting: String, environment: String) -> String:
	if OS.has_environment(environment):
		return OS.get_environment(environment)
	return str(ProjectSettings.get_setting(setting, DEFAULTS[setting]))
