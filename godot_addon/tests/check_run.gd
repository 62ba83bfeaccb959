extends SceneTree
## What the addon's GDScript test scripts share: count checks, print one line per failure and
## "N passed, M failed" at the end (the pytest drivers read that line), exit 1 on any failure.

var passed: int = 0
var failed: int = 0


## Counts one check; `detail` is printed only when it failed.
func _expect(condition: bool, name: String, detail: String = "") -> void:
	if condition:
		passed += 1
	else:
		failed += 1
		print("FAIL %s %s" % [name, detail])


func _finish() -> void:
	print("%d passed, %d failed" % [passed, failed])
	quit(1 if failed > 0 else 0)
