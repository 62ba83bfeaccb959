class_name LoreguardSidecarStatus
extends RefCounted
## Where the sidecar stands, as the `Loreguard` autoload's `status_changed` signal reports it:
##
##     Loreguard.status_changed.connect(func(s: LoreguardSidecarStatus): $Status.text = s.describe())
##
## `describe()` says it in words a player understands; `reason` has the technical detail.

enum State {
	## Looking for the sidecar, or launching it.
	STARTING,
	## The launched sidecar is loading its model; `loading_s` counts the seconds so far.
	LOADING_MODEL,
	## Connected, checked, and the world and NPCs sent: NPCs can talk.
	READY,
	## The sidecar stopped or the connection dropped; `attempt` of `max_attempts` is under way.
	RESTARTING,
	## Gave up: `reason` says why in one line: a launch command that cannot start or exited before
	## it answered (with the command and the fix), or the sidecar's last log line after its restarts.
	FAILED,
	## The launched sidecar is downloading its model (loreguard/sidecar/allow_model_download on):
	## `download_fraction()` of `download_total_mib`; at 1.0 it checks the file's sha256.
	DOWNLOADING_MODEL,
	## Connected, but the sidecar's model server (`serve --backend openai`) is unreachable: NPCs
	## answer with their fallback lines until a reply comes from the model again (then READY).
	MODEL_UNREACHABLE,
}

## FAILED `cause`: another sidecar (a second copy of the game, or the editor's run beside an
## exported build) holds this game's save folder, so this one refused to start on it.
const SAVE_IN_USE := "save_in_use"

## Where the sidecar stands.
var state: State = State.STARTING
## The technical detail: an address, an exit, a log line.
var reason: String = ""
## LOADING_MODEL: seconds spent loading so far.
var loading_s: float = 0.0
## LOADING_MODEL: what is loading, as the sidecar names it (a model file, a server URL).
var loading_what: String = ""
## DOWNLOADING_MODEL: MiB downloaded so far.
var download_done_mib: float = 0.0
## DOWNLOADING_MODEL: the file's size in MiB; 0 when the Hub did not say.
var download_total_mib: float = 0.0
## READY: where the model runs, as `hello` says: "vulkan:0 (NVIDIA GeForce RTX 3060, 29 layers)",
## "the CPU", or "" for a model the sidecar does not run itself (a remote server, a script).
var device: String = ""
## FAILED: why, when a game can say it better than `reason`: SAVE_IN_USE, or "".
var cause: String = ""
## RESTARTING: which restart this is (0: reconnecting to a sidecar still running).
var attempt: int = 0
## RESTARTING: how many restarts are tried before FAILED.
var max_attempts: int = 0


func _init(
	new_state: State = State.STARTING, why: String = "", restart_attempt: int = 0, restart_max: int = 0
) -> void:
	state = new_state
	reason = why
	attempt = restart_attempt
	max_attempts = restart_max


## Where the model of the sidecar that answered `hello` with `body` runs (see `device`).
static func device_of(body: Dictionary) -> String:
	var model: Variant = body.get("model")
	if not model is Dictionary:
		return ""
	var extra: Variant = model.get("extra")
	if not extra is Dictionary or not extra.has("device"):
		return ""
	if str(extra["device"]) == "cpu":
		return "the CPU"
	return (
		"%s (%s, %d layers)" % [extra["device"], extra.get("device_name", "?"), int(extra.get("offloaded_layers", 0))]
	)


## The state's name as in the docs: "starting", "downloading_model", "loading_model", "ready",
## "model_unreachable", "restarting", "failed".
func state_name() -> String:
	return (State.find_key(state) as String).to_lower()


## DOWNLOADING_MODEL: the part downloaded, 0.0 to 1.0 (0.0 when the size is unknown).
func download_fraction() -> float:
	return clampf(download_done_mib / download_total_mib, 0.0, 1.0) if download_total_mib > 0.0 else 0.0


## One short sentence for the player (a game may word its own from `state`).
func describe() -> String:
	match state:
		State.STARTING:
			return "Starting the dialogue engine…"
		State.DOWNLOADING_MODEL:
			if download_total_mib <= 0.0:
				return "Downloading the dialogue model… %d MiB" % int(download_done_mib)
			if download_fraction() >= 1.0:
				return "Checking the downloaded dialogue model…"
			return (
				"Downloading the dialogue model… %d%% (%d of %d MiB)"
				% [int(download_fraction() * 100), int(download_done_mib), int(download_total_mib)]
			)
		State.LOADING_MODEL:
			return "Loading the dialogue model… %d s" % int(loading_s)
		State.READY:
			return "Ready to talk."
		State.MODEL_UNREACHABLE:
			return "The model server is unreachable; NPCs answer with their fallback lines."
		State.RESTARTING:
			return "The dialogue engine stopped; restarting it (try %d of %d)…" % [attempt, max_attempts]
	if cause == SAVE_IN_USE:
		return "Another copy of the game is using this save; close it, then start again."
	return "Dialogue is unavailable: %s" % reason


func _to_string() -> String:
	var extra := " %.1f s" % loading_s if state == State.LOADING_MODEL else ""
	if state == State.DOWNLOADING_MODEL:
		extra = " %.1f/%.1f MiB" % [download_done_mib, download_total_mib]
	return "%s%s: %s" % [state_name(), extra, reason]
