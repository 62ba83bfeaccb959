extends SceneTree
## Writes the demo's designer resources from the terminal demo's JSON, the single source of the
## demo NPCs and world:
##
##     godot --headless --path demo_project -s res://tools/import_demo_data.gd
##
## Edit server/demo/data/*.json, then run this again. tests/godot_addon/test_integration.py checks that the
## committed resources still serialize to exactly that JSON.

const SOURCE := "res://../server/demo/data"


func _init() -> void:
	var source := ProjectSettings.globalize_path(SOURCE)
	var failed := false
	var world_data: Variant = _read_json(source.path_join("world.json"))
	failed = failed or not _save(LoreguardWorld.from_dict(world_data), "res://world.tres")
	for file in DirAccess.get_files_at(source.path_join("npcs")):
		if not file.ends_with(".json"):
			continue
		var data: Dictionary = _read_json(source.path_join("npcs").path_join(file))
		var npc_id: String = data["id"]
		failed = failed or not _save(LoreguardNpcProfile.from_dict(data), "res://npcs/%s_profile.tres" % npc_id)
		var rules := LoreguardRuleSet.from_dicts(npc_id + "_rules", data.get("rules", []))
		failed = failed or not _save(rules, "res://npcs/%s_rules.tres" % npc_id)
	quit(1 if failed else 0)


func _read_json(path: String) -> Variant:
	var parsed: Variant = JSON.parse_string(FileAccess.get_file_as_string(path))
	if parsed == null:
		push_error("cannot read %s" % path)
		quit(1)
	return parsed


func _save(resource: Resource, path: String) -> bool:
	var err := ResourceSaver.save(resource, path)
	if err != OK:
		push_error("cannot write %s: %s" % [path, error_string(err)])
		return false
	print("wrote ", path)
	return true
