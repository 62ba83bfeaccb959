class_name LoreguardResult
extends RefCounted
## The outcome of one request: `ok` with the reply `body`, or an `error`. An `interact` reply
## is also read into a typed `line`.

## True when the sidecar answered with the reply, false when `error` says why not.
var ok: bool = false
## The reply type, e.g. "interact.ok"; "error" when the request failed.
var type: String = ""
## The reply body as it came over the wire; {} when the request failed.
var body: Dictionary = {}
## Why the request failed; null when `ok`.
var error: LoreguardError
## For a successful `interact` (LoreguardClient.interact, LoreguardNPC.say): the body as a
## LoreguardLine. Null for other requests and for failures.
var line: LoreguardLine


static func success(reply_type: String, reply_body: Dictionary) -> LoreguardResult:
	var out := LoreguardResult.new()
	out.ok = true
	out.type = reply_type
	out.body = reply_body
	return out


static func failure(why: LoreguardError) -> LoreguardResult:
	var out := LoreguardResult.new()
	out.type = "error"
	out.error = why
	return out


func _to_string() -> String:
	if not ok:
		return "error %s" % error
	var text := JSON.stringify(body)
	return "%s %s" % [type, text if text.length() <= 160 else text.left(157) + "..."]
