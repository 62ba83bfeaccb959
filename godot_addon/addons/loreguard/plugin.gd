@tool
extends EditorPlugin
## Thin on purpose: registers the `Loreguard` autoload and the project settings. Everything
## else is plain classes that work without the editor.

const AUTOLOAD := "Loreguard"


func _enable_plugin() -> void:
	add_autoload_singleton(AUTOLOAD, "res://addons/loreguard/client/client.gd")


func _disable_plugin() -> void:
	remove_autoload_singleton(AUTOLOAD)


func _enter_tree() -> void:
	LoreguardSettings.register()
