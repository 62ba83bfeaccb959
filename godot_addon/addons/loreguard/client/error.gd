class_name LoreguardError
extends RefCounted
## Why a request failed: one of the protocol's error codes (PROTOCOL.md), or one of those the
## client adds itself (`NO_REPLY`, `SIDECAR_DOWN`, `CLIENT`). A failed request never changed the
## sidecar's memory, except that a `NO_REPLY` or `SIDECAR_DOWN` with `details.sent` cannot say
## either way.

## The message was not MessagePack, not a map, or its envelope was malformed.
const BAD_REQUEST := "bad_request"
const UNSUPPORTED_VERSION := "unsupported_version"
const UNKNOWN_TYPE := "unknown_type"
## The body failed its schema; `details` names each field path and why.
const INVALID := "invalid"
## An NPC, slot or record that does not exist (e.g. `interact` for an unregistered NPC).
const NOT_FOUND := "not_found"
const FORBIDDEN := "forbidden"
## The sidecar's queue is full: retry later.
const OVERLOADED := "overloaded"
## The interaction ran past the sidecar's deadline.
const TIMEOUT := "timeout"
## The sidecar could not save what was asked (the disk is full, the save folder is gone or
## read-only); nothing was changed. `details.fault` says which, `details.reason` in words.
const STORAGE_UNAVAILABLE := "storage_unavailable"
const INTERNAL := "internal"
## The request was cancelled before it committed (`LoreguardClient.cancel_line`, a scene's end):
## nothing of it was remembered.
const CANCELLED := "cancelled"
## Client side: no reply within the request timeout, or the connection dropped first.
const NO_REPLY := "no_reply"
## Client side: the sidecar died, or the connection to it dropped, while the request was out;
## or the sidecar could not be (re)started at all. The autoload restarts a sidecar it launched.
const SIDECAR_DOWN := "sidecar_down"
## Client side: the request could not be sent at all (e.g. a value MessagePack cannot carry).
const CLIENT := "client"

var code: String
var message: String
var details: Dictionary


func _init(error_code: String, error_message: String, error_details: Dictionary = {}) -> void:
	code = error_code
	message = error_message
	details = error_details


## Worth sending again later: the sidecar was busy, slow or unreachable.
func is_retryable() -> bool:
	return code in [OVERLOADED, TIMEOUT, NO_REPLY, SIDECAR_DOWN]


func _to_string() -> String:
	return "%s: %s" % [code, message]
