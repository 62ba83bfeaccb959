@tool
extends EditorPlugin
## Thin on purpose: registers the `Loreguard` autoload, the project settings and the debugger
## tab. Everything else is plain classes that work without the editor.

const AUTOLOAD := "Loreguard"
const DebuggerPlugin := preload("res://addons/loreguard/debugger/debugger_plugin.gd")

var _debugger: EditorDebuggerPlugin


func _enable_plugin() -> void:
	add_autoload_singleton(AUTOLOAD, "res://addons/loreguard/client/client.gd")


func _disable_plugin() -> void:
	remove_autoload_singleton(AUTOLOAD)


func _enter_tree() -> void:
	LoreguardSettings.register()
	_debugger = DebuggerPlugin.new()
	add_debugger_plugin(_debugger)


func _exit_tree() -> void:
	remove_debugger_plugin(_debugger)
