class_name LoreguardRequests
extends RefCounted
## The `Loreguard` autoload's requests, from id to outcome: each gets the next id and its
## envelope (`{"v", "id", "type", "body"}`, MessagePack), waits for a connection or goes on the
## wire, and is matched by id with its streamed chunks and its reply. Each resolves exactly once:
## with the reply, with the sidecar's typed error, with `no_reply` when its timeout passes, or
## with `sidecar_down` when LoreguardClient gives up on it. The client decides when a request may
## go out and which ones outlive a lost connection; this keeps the rest.

const PROTOCOL_VERSION := 1

var _dealer: LoreguardDealer
var _next_id: int = 1
## Made while there was no connection to send them on, oldest first.
var _waiting: Array[LoreguardPendingRequest] = []
## On the wire and not yet answered, by id.
var _in_flight: Dictionary = {}


func _init(over: LoreguardDealer) -> void:
	_dealer = over


## A request for `type`, numbered and encoded, due within `timeout_ms`. One that cannot be
## encoded comes back already resolved with a `client` error.
func make(type: String, body: Dictionary, timeout_ms: int) -> LoreguardPendingRequest:
	var pending := LoreguardPendingRequest.new()
	pending.id = _next_id
	_next_id += 1
	var envelope := {"v": PROTOCOL_VERSION, "id": pending.id, "type": type, "body": body}
	var encoded := LoreguardMsgPack.encode(envelope)
	if not encoded.ok:
		pending.resolve(
			LoreguardResult.failure(
				LoreguardError.new(LoreguardError.CLIENT, "cannot encode %s: %s" % [type, encoded.error])
			)
		)
		return pending
	pending.bytes = encoded.bytes
	pending.type = type
	pending.npc_id = str(body.get("npc_id", ""))
	pending.timeout_ms = timeout_ms
	pending.deadline_ms = Time.get_ticks_msec() + timeout_ms
	return pending


## Puts `pending` on the wire; false when the dealer would not take it.
func send(pending: LoreguardPendingRequest) -> bool:
	if not _dealer.send(pending.bytes):
		return false
	_in_flight[pending.id] = pending
	return true


## The NPC's `interact` waiting for the connection or on the wire; null when there is none.
func line_of(npc_id: String) -> LoreguardPendingRequest:
	for pending: LoreguardPendingRequest in _waiting:
		if pending.type == "interact" and pending.npc_id == npc_id:
			return pending
	for pending: LoreguardPendingRequest in _in_flight.values():
		if pending.type == "interact" and pending.npc_id == npc_id:
			return pending
	return null


## Keeps `pending` until the connection is up (`take_waiting`) or its timeout passes.
func hold(pending: LoreguardPendingRequest) -> void:
	_waiting.append(pending)


## Whether `pending` was waiting for the connection; it no longer is (its caller sends it now).
func withdraw(pending: LoreguardPendingRequest) -> bool:
	var at := _waiting.find(pending)
	if at < 0:
		return false
	_waiting.remove_at(at)
	return true


## Every request that waited for the connection, oldest first; none waits after this.
func take_waiting() -> Array[LoreguardPendingRequest]:
	var waiting := _waiting
	_waiting = []
	return waiting


func has_in_flight() -> bool:
	return not _in_flight.is_empty()


## Fails every request on the wire with `sidecar_down` (`"sent": true`: the sidecar may have
## acted on it). Those `requeue(pending)` is true for wait for the next connection instead.
func fail_in_flight(why: String, requeue: Callable) -> void:
	var lost := _in_flight.values()
	_in_flight.clear()
	for pending: LoreguardPendingRequest in lost:
		if requeue.call(pending):
			_waiting.append(pending)
		else:
			pending.resolve(
				LoreguardResult.failure(LoreguardError.new(LoreguardError.SIDECAR_DOWN, why, {"sent": true}))
			)


## Fails every request waiting for the connection with `sidecar_down`, except those
## `keep(pending)` is true for.
func refuse_waiting(why: String, keep: Callable) -> void:
	for pending in _waiting.duplicate():
		if not keep.call(pending):
			_waiting.erase(pending)
			pending.resolve(LoreguardResult.failure(LoreguardError.new(LoreguardError.SIDECAR_DOWN, why)))


## A message from the sidecar (the dealer's `message_received`): a chunk of a streamed request
## goes to its `on_chunk` and restarts its timeout; a reply or an error resolves its request.
func on_message(parts: Array[PackedByteArray]) -> void:
	if parts.size() != 1:
		push_warning("Loreguard: ignored a reply of %d frames (the protocol uses one)" % parts.size())
		return
	var decoded := LoreguardMsgPack.decode(parts[0])
	if not decoded.ok or not decoded.value is Dictionary:
		push_warning("Loreguard: ignored an undecodable reply: %s" % decoded.error)
		return
	var reply: Dictionary = decoded.value
	var pending: LoreguardPendingRequest = _in_flight.get(reply.get("id"))
	if pending == null:
		return  # a reply for a request that already timed out
	var body: Dictionary = reply.get("body", {}) if reply.get("body") is Dictionary else {}
	if str(reply.get("type", "")).ends_with(".chunk"):
		# A streamed request's partial reply: the request stays in flight until its reply.
		pending.deadline_ms = Time.get_ticks_msec() + pending.timeout_ms
		if pending.on_chunk.is_valid():
			pending.on_chunk.call(body)
		return
	_in_flight.erase(pending.id)
	if reply.get("type") == "error":
		var details: Dictionary = body.get("details") if body.get("details") is Dictionary else {}
		pending.resolve(
			LoreguardResult.failure(
				LoreguardError.new(
					str(body.get("code", LoreguardError.INTERNAL)), str(body.get("message", "")), details
				)
			)
		)
	else:
		pending.resolve(LoreguardResult.success(str(reply.get("type", "")), body))


## Fails with `no_reply` every request, waiting or on the wire, whose deadline has passed;
## `address` names the sidecar when there is no connection to it.
func expire(now_ms: int, address: String) -> void:
	var expired: Array[LoreguardPendingRequest] = []
	for pending: LoreguardPendingRequest in _in_flight.values():
		if now_ms >= pending.deadline_ms:
			expired.append(pending)
	for pending in _waiting:
		if now_ms >= pending.deadline_ms:
			expired.append(pending)
	for pending in expired:
		_in_flight.erase(pending.id)
		_waiting.erase(pending)
		var why := (
			"no reply within the request timeout"
			if _dealer.is_ready()
			else "no connection to the sidecar at %s (%s)" % [address, _dealer.last_error]
		)
		pending.resolve(LoreguardResult.failure(LoreguardError.new(LoreguardError.NO_REPLY, why)))
