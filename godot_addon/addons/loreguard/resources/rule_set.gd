@tool
@icon("../icon.svg")
class_name LoreguardRuleSet
extends Resource
## A named, shareable list of rules (e.g. "gate guards"), given to NPCs and the world.

## A name for the set, e.g. "gate_guards"; rules keep their own ids.
@export var id: String = ""
## The rules, in order.
@export var rules: Array[LoreguardRule] = []


func to_dicts() -> Array:
	return LoreguardDict.to_dicts(rules)


static func from_dicts(set_id: String, rules_data: Array) -> LoreguardRuleSet:
	var out := LoreguardRuleSet.new()
	out.id = set_id
	for rule: Dictionary in rules_data:
		out.rules.append(LoreguardRule.from_dict(rule))
	return out


## Every rule of every set, in order.
static func flatten(rule_sets: Array[LoreguardRuleSet]) -> Array:
	var out: Array = []
	for rule_set in rule_sets:
		if rule_set != null:
			out.append_array(rule_set.to_dicts())
	return out
