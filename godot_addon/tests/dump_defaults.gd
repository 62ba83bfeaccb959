extends SceneTree
## Prints what every designer Resource sends when left at its defaults, as one JSON line that
## tests/godot_addon/test_resources.py checks against the sidecar's JSON Schema (schemas/json/).


func _init() -> void:
	var defaults := {
		"profile": LoreguardNpcProfile.new().to_dict(),
		"world": LoreguardWorld.new().to_dict(),
		"fact": LoreguardFact.new().to_dict(),
		"claim": LoreguardClaim.new().to_dict(),
		"secret": LoreguardSecret.new().to_dict(),
		"intent": LoreguardIntent.new().to_dict(),
		"intent_param": LoreguardIntentParam.new().to_dict(),
		"example": LoreguardExample.new().to_dict(),
		"rule": LoreguardRule.new().to_dict(),
	}
	print("LOREGUARD_DEFAULTS " + JSON.stringify(defaults))
	quit(0)
