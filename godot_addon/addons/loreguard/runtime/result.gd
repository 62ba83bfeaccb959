class_name LoreguardResult
extends RefCounted
## The outcome of one request: `ok` with the reply `body`, or an `error`.

var ok: bool = false
## The reply type, e.g. "interact.ok"; "error" when the request failed.
var type: String = ""
var body: Dictionary = {}
var error: LoreguardError


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
