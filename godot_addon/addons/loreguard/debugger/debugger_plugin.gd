@tool
extends EditorDebuggerPlugin
## Editor side of the Loreguard debugger: one "Loreguard" tab per debug session, fed by the
## game's LoreguardDebugForwarder through "loreguard:*" debugger messages. No class_name: it
## extends an editor-only class, and exported games must never load it.

const CAPTURE := "loreguard"

var panels: Dictionary = {}


func _has_capture(capture: String) -> bool:
	return capture == CAPTURE


func _capture(message: String, data: Array, session_id: int) -> bool:
	var panel: LoreguardDebuggerPanel = panels.get(session_id)
	if panel == null or data.is_empty():
		return false
	match message:
		"loreguard:record":
			panel.add_record(data[0])
		"loreguard:package":
			panel.save_package_text(data[0], int(data[1]) if data.size() > 1 else 0)
		"loreguard:package_error":
			panel.status.text = "export failed: %s" % data[0]
		_:
			return false
	return true


func _setup_session(session_id: int) -> void:
	var panel := LoreguardDebuggerPanel.new()
	var session := get_session(session_id)
	panel.export_requested.connect(func(last: int) -> void: session.send_message("loreguard:export", [last]))
	panels[session_id] = panel
	session.add_session_tab(panel)
