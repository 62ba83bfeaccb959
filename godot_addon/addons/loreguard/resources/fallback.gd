@tool
@icon("../icon.svg")
class_name LoreguardFallback
extends Resource
## Authored lines for one trigger reason, spoken when no valid line can be produced for an
## interaction with that trigger (e.g. every model attempt broke a rule). A line that would
## itself break a rule is passed over.

## The trigger these lines stand in for.
@export var trigger: LoreguardTrigger.Reason = LoreguardTrigger.Reason.PLAYER_UTTERANCE
## The lines, tried first to last.
@export var lines: PackedStringArray


func _init(for_trigger: LoreguardTrigger.Reason = LoreguardTrigger.Reason.PLAYER_UTTERANCE) -> void:
	trigger = for_trigger


## The wire's `fallbacks` object: {"by_trigger": {name: [lines]}, "generic": [lines]}.
static func to_wire(by_trigger: Array[LoreguardFallback], generic: PackedStringArray) -> Dictionary:
	var triggers := {}
	for fallback in by_trigger:
		if fallback == null:
			continue
		var name := LoreguardTrigger.name_of(fallback.trigger)
		var lines_so_far: Array = triggers.get(name, [])
		lines_so_far.append_array(Array(fallback.lines))
		triggers[name] = lines_so_far
	return {"by_trigger": triggers, "generic": Array(generic)}


## The per-trigger fallbacks of a body with a `fallbacks` object, in the order of NAMES.
static func list_from_wire(data: Dictionary, where: String) -> Array[LoreguardFallback]:
	var out: Array[LoreguardFallback] = []
	var fallbacks: Variant = data.get("fallbacks", {})
	var by_trigger: Variant = fallbacks.get("by_trigger", {}) if fallbacks is Dictionary else {}
	var names: Array = by_trigger.keys() if by_trigger is Dictionary else []
	names.sort_custom(
		func(a: Variant, b: Variant) -> bool:
			return LoreguardTrigger.from_name(str(a)) < LoreguardTrigger.from_name(str(b))
	)
	for name: Variant in names:
		var reason := LoreguardTrigger.from_name(str(name))
		if reason < 0:
			push_error("Loreguard: %s: unknown trigger reason %s in fallbacks" % [where, name])
			continue
		var fallback := LoreguardFallback.new(reason as LoreguardTrigger.Reason)
		fallback.lines = PackedStringArray(by_trigger[name])
		fallback.resource_name = str(name)
		out.append(fallback)
	return out
