class_name LoreguardDebugForwarder
extends RefCounted
## The running game's half of the editor's Loreguard debugger tab. After each interaction it
## pulls the new audit records from the sidecar (`audit.tail` after a cursor) and sends each to
## the editor as the debugger message "loreguard:record". It answers the editor's
## "loreguard:export" with the text of a JSON debug package ("loreguard:package").
##
## The `Loreguard` autoload makes one when the game runs under the editor's debugger
## (`EngineDebugger.is_active()`); nothing runs otherwise. Each record carries
## `earlier_session: true` when the sidecar wrote it before this game first connected (a sidecar
## keeps its log across runs), so the tab can list this session's records only.

const CAPTURE := "loreguard"
const BACKLOG := 20

var client: LoreguardClient
## Where messages go: `EngineDebugger.send_message` in a debugged game; tests pass their own.
var sink: Callable
## The newest log position forwarded; -1 until the first pull.
var cursor: int = -1
var forwarded: int = 0
## The sidecar's newest log position when this game first connected; -1 until known.
var session_start: int = -1

var _pulling: bool = false
var _pull_again: bool = false


func _init(for_client: LoreguardClient, to_sink: Callable = Callable(EngineDebugger, "send_message")) -> void:
	client = for_client
	sink = to_sink


## A forwarder wired to the editor, or null when the game is not being debugged.
static func attach_if_debugging(for_client: LoreguardClient) -> LoreguardDebugForwarder:
	if not EngineDebugger.is_active():
		return null
	var forwarder := LoreguardDebugForwarder.new(for_client)
	for_client.connected.connect(forwarder.mark_session_start, CONNECT_ONE_SHOT)
	if not EngineDebugger.has_capture(CAPTURE):
		EngineDebugger.register_message_capture(CAPTURE, forwarder.on_editor_message)
	return forwarder


## Remembers where this game's records start in the sidecar's log (call once connected).
func mark_session_start() -> void:
	var result := await client.audit_tail("", 1)
	if result.ok and session_start < 0:
		session_start = int(result.body.get("last_seq", 0))


## Forwards every record the editor has not seen yet (the recent backlog on the first call).
## Calls that arrive while a pull is under way fold into one more round.
func pull() -> void:
	if _pulling:
		_pull_again = true
		return
	_pulling = true
	_pull_again = true
	while _pull_again:
		_pull_again = false
		var result := await client.audit_tail("", BACKLOG if cursor < 0 else 100, cursor)
		if not result.ok:
			break
		for record: Dictionary in result.body.get("records", []):
			cursor = maxi(cursor, int(record.get("seq", 0)))
			record["earlier_session"] = session_start >= 0 and int(record.get("seq", 0)) <= session_start
			sink.call("loreguard:record", [record])
			forwarded += 1
		cursor = maxi(cursor, int(result.body.get("last_seq", 0)))
	_pulling = false


## The editor's messages ("export" with the number of newest records to package).
func on_editor_message(message: String, data: Array) -> bool:
	if message.trim_prefix(CAPTURE + ":") == "export":
		export_package(int(data[0]) if not data.is_empty() else 50)
		return true
	return false


func export_package(last: int) -> void:
	var result := await client.request("audit.export", {"last": last, "form": "json"})
	if result.ok:
		sink.call("loreguard:package", [result.body.get("text", ""), int(result.body.get("records", 0))])
	else:
		sink.call("loreguard:package_error", [str(result.error)])
