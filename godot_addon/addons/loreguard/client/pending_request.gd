class_name LoreguardPendingRequest
extends RefCounted
## One request on its way to the sidecar, from its encoded envelope to its outcome. It is
## resolved exactly once (by the reply, the sidecar's typed error, its timeout or a lost
## connection); `done` then wakes the caller that awaits it. LoreguardRequests makes them.

## Emitted once, when `result` is set.
signal done

## The envelope's id: the sidecar's reply carries it back.
var id: int
## The message type, and the NPC its body names (if any): `LoreguardClient.cancel_line` finds it.
var type: String
var npc_id: String
## The encoded envelope, as it goes on the wire.
var bytes: PackedByteArray
## When it fails with `no_reply` unless answered (Time.get_ticks_msec()).
var deadline_ms: int
var timeout_ms: int
## Null until the request is resolved.
var result: LoreguardResult
## Streamed requests: called with each `*.chunk` body, in order, before the reply.
var on_chunk: Callable


## The first outcome wins: a reply that comes after the request timed out changes nothing.
func resolve(with: LoreguardResult) -> void:
	if result == null:
		result = with
		done.emit()
