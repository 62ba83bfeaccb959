@tool
extends EditorPlugin
## Test helper for tests/godot_addon/test_editor_path.py, copied into a copy of a project and
## enabled there: the editor saves the project's settings as it does when a developer changes
## one (without this probe in the enabled plugins), then opens each scene named in
## LOREGUARD_PROBE_SCENES (comma-separated res:// paths) and prints every node configuration
## warning its Scene dock shows, one "editor probe: warning <node>: <text>" line each; then quits.

## Frames the Scene dock gets to show an opened scene's nodes and their warning buttons.
const SETTLE_FRAMES := 30


func _enter_tree() -> void:
	_probe.call_deferred()


func _probe() -> void:
	_save_settings_without_this_probe()
	for scene in OS.get_environment("LOREGUARD_PROBE_SCENES").split(",", false):
		EditorInterface.open_scene_from_path(scene)
		for i in SETTLE_FRAMES:
			await get_tree().process_frame
		var root := EditorInterface.get_edited_scene_root()
		print("editor probe: opened %s (%s)" % [scene, root.name if root != null else "nothing"])
		_print_warnings()
	print("editor probe: done")
	get_tree().quit()


func _save_settings_without_this_probe() -> void:
	var own: String = (get_script() as Script).resource_path.get_base_dir().path_join("plugin.cfg")
	var enabled: PackedStringArray = ProjectSettings.get_setting("editor_plugins/enabled", PackedStringArray())
	var others := PackedStringArray()
	for plugin in enabled:
		if plugin != own:
			others.append(plugin)
	if others.is_empty():
		ProjectSettings.clear("editor_plugins/enabled")
	else:
		ProjectSettings.set_setting("editor_plugins/enabled", others)
	print("editor probe: saved the project settings: %s" % error_string(ProjectSettings.save()))


## The Scene dock is the editor's only reader of node configuration warnings (the method is not
## exposed to scripts): each warning is a button on the node's row, its tooltip the text.
func _print_warnings() -> void:
	var seen := {}
	for editor in EditorInterface.get_base_control().find_children("*", "SceneTreeEditor", true, false):
		for tree: Tree in editor.find_children("*", "Tree", true, false):
			_walk(tree.get_root(), "", seen)


func _walk(item: TreeItem, parent: String, seen: Dictionary) -> void:
	if item == null:
		return
	var path := parent.path_join(item.get_text(0)) if not parent.is_empty() else item.get_text(0)
	for i in item.get_button_count(0):
		var tip := item.get_button_tooltip_text(0, i)
		if tip.contains("configuration warning") and not seen.has(path):
			seen[path] = true
			print("editor probe: warning %s: %s" % [path, tip.replace("\n", " ")])
	for child in item.get_children():
		_walk(child, path, seen)
