class_name LoreguardWorldIntent
extends RefCounted
## An approved request for the game to act, e.g. `open_gate` with {"gate_id": "north"}: one
## entry of a reply's `intents` (the wire's WorldIntent). Not to be confused with
## LoreguardIntent, the designer resource that declares which intents an NPC may ask for.
##
## A sale the sidecar's rules made (an intent with wares, decided by the rules) carries its
## `payment`: take `payment_value` from the player's purse when you hand the wares over, then
## report the new purse with `set_state`, so the next request is decided on it.

## The intent's type, one the NPC's profile allows (LoreguardIntent.type).
var type: String = ""
## Its parameters: names to bool, int, float or String values, as the profile declares them.
var params: Dictionary = {}
## The wire's `payment` ({"amount", "currency", "value"}), or {} when the intent is no sale.
var payment: Dictionary = {}


## Reads one wire intent; a missing or malformed `params` or `payment` becomes {}.
static func from_dict(data: Dictionary) -> LoreguardWorldIntent:
	var out := LoreguardWorldIntent.new()
	out.type = str(data.get("type", ""))
	out.params = data.get("params") if data.get("params") is Dictionary else {}
	out.payment = data.get("payment") if data.get("payment") is Dictionary else {}
	return out


## Whether the intent is a sale the game must settle.
func is_sale() -> bool:
	return not payment.is_empty()


## What the sale costs in the world's smallest currency (what leaves the purse); 0 for no sale.
func payment_value() -> int:
	return int(payment.get("value", 0))


## The price as a player reads it: "5 silver"; "" for no sale.
func price_text() -> String:
	if payment.is_empty():
		return ""
	return "%d %s" % [int(payment.get("amount", 0)), str(payment.get("currency", ""))]


func _to_string() -> String:
	if payment.is_empty():
		return "%s%s" % [type, JSON.stringify(params)]
	return "%s%s for %s" % [type, JSON.stringify(params), price_text()]
