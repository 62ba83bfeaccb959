class_name LoreguardTrigger
extends RefCounted
## Why an NPC speaks: the wire's `trigger_reason`, as a typed enum for the inspector (rule
## conditions, fallbacks). The wire carries the lower-case names in NAMES.

enum Reason {
	## The player said something.
	PLAYER_UTTERANCE,
	## The player entered a zone.
	ZONE_TRIGGER,
	## A time of day or timer came round.
	TIME_TRIGGER,
	## A quest step changed.
	QUEST_TRIGGER,
	## Another NPC spoke to this one.
	NPC_INTERACTION,
	## Something happened in the world.
	WORLD_EVENT,
	## Anything else the game defines.
	CUSTOM,
}

## The wire name of each Reason, in the enum's order.
const NAMES := [
	"player_utterance", "zone_trigger", "time_trigger", "quest_trigger", "npc_interaction", "world_event", "custom"
]


static func name_of(reason: Reason) -> String:
	return NAMES[reason]


## The Reason named `wire_name`, or -1 when there is none.
static func from_name(wire_name: String) -> int:
	return NAMES.find(wire_name)


static func names(reasons: Array[Reason]) -> Array:
	var out: Array = []
	for reason in reasons:
		out.append(name_of(reason))
	return out


## Reasons from wire names; an unknown name is reported and left out.
static func from_names(wire_names: PackedStringArray, where: String) -> Array[Reason]:
	var out: Array[Reason] = []
	for wire_name in wire_names:
		var reason := from_name(wire_name)
		if reason < 0:
			push_error("Loreguard: %s: unknown trigger reason %s (one of %s)" % [where, wire_name, ", ".join(NAMES)])
		else:
			out.append(reason as Reason)
	return out
