@tool
extends EditorPlugin
## Thin on purpose: registers the `Loreguard` autoload, the project settings and the debugger
## tab. Everything else is plain classes that work without the editor.

const AUTOLOAD := "Loreguard"
const DebuggerPlugin := preload("./debugger/debugger_plugin.gd")

var _debugger: EditorDebuggerPlugin


func _enable_plugin() -> void:
	# The autoload needs a res:// path; built from this script's own, so the addon works
	# wherever it is installed.
	var script: Script = get_script()
	add_autoload_singleton(AUTOLOAD, script.resource_path.get_base_dir().path_join("client/client.gd"))


func _disable_plugin() -> void:
	remove_autoload_singleton(AUTOLOAD)


func _enter_tree() -> void:
	LoreguardSettings.register()
	_debugger = DebuggerPlugin.new()
	add_debugger_plugin(_debugger)


func _exit_tree() -> void:
	remove_debugger_plugin(_debugger)
