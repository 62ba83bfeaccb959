class_name LoreguardSession
extends RefCounted
## The designer data a sidecar must hold before it can answer for the game: the world, each
## NPC's registration, and the NPCs the game warmed. LoreguardClient remembers it here so that
## every new connection (a restarted sidecar knows nothing) gets it again before anything else:
## the world first, then the NPCs in the order they registered, then the warm requests.

var _entries: Array[_Entry] = []
## NPC ids the game asked to warm (a set): warmed again once the session is replayed.
var _warmed: Dictionary = {}


## One piece of designer data, as last sent.
class _Entry:
	extends RefCounted
	var key: String
	var type: String
	var body: Dictionary
	## The request its caller awaits, while one does.
	var waiter: LoreguardPendingRequest


## Remembers `body` (sent as `type`) as the data under `key`, in place of what was there;
## `waiter`, unless null, is the request its caller now awaits.
func remember(type: String, key: String, body: Dictionary, waiter: LoreguardPendingRequest) -> void:
	var entry: _Entry = null
	for existing in _entries:
		if existing.key == key:
			entry = existing
	if entry == null:
		entry = _Entry.new()
		entry.key = key
		entry.type = type
		_entries.append(entry)
		# The world goes first on a reconnect, then NPCs in the order they registered.
		_entries.sort_custom(
			func(a: _Entry, b: _Entry) -> bool: return a.type == "world.load" and b.type != "world.load"
		)
	entry.body = body
	if waiter != null:
		entry.waiter = waiter


## Warms `npc_id` again on every reconnect, after the registrations (a new cache is empty).
func warm(npc_id: String) -> void:
	_warmed[npc_id] = true


## Whether `pending` sends designer data: it outlives a lost connection, since the replay on the
## next one sends it again.
func is_waiter(pending: LoreguardPendingRequest) -> bool:
	for entry in _entries:
		if entry.waiter == pending:
			return true
	return false


## The requests that give a new connection the designer data, in the order to send them. A
## request whose caller still waits for the connection is taken from `requests`' queue and sent
## as it is: this send answers it. A failed re-send is only a warning: nobody awaits it.
func replay(requests: LoreguardRequests, timeout_ms: int) -> Array[LoreguardPendingRequest]:
	var sends: Array[LoreguardPendingRequest] = []
	for entry in _entries:
		var pending := entry.waiter
		if pending == null or not requests.withdraw(pending):
			pending = requests.make(entry.type, entry.body, timeout_ms)
			var key := entry.key
			pending.done.connect(func() -> void: _warn_replay(key, pending.result), CONNECT_ONE_SHOT)
		sends.append(pending)
	# After the registrations, which the sidecar handles in arrival order.
	var warm_ids: Array = _warmed.keys()
	warm_ids.sort()
	for npc_id: String in warm_ids:
		var warm_pending := requests.make("npc.warm", {"npc_id": npc_id}, timeout_ms)
		var warm_key := "npc.warm " + npc_id
		warm_pending.done.connect(func() -> void: _warn_replay(warm_key, warm_pending.result), CONNECT_ONE_SHOT)
		sends.append(warm_pending)
	return sends


func _warn_replay(key: String, result: LoreguardResult) -> void:
	if not result.ok:
		push_warning("Loreguard: re-sending %s after a reconnect failed: %s" % [key, result.error])
