class_name LoreguardLauncher
extends RefCounted
## How the `Loreguard` autoload gets a sidecar to talk to, and the status it reports about it.
##
## With auto-launch on, it waits LAUNCH_PROBE_MS for a sidecar on the port, lets one found there
## carry requests only when it is the one this game launched (or `loreguard/sidecar/reuse_running`
## is on), launches this game's own otherwise (LoreguardSupervisor runs the process), restarts it
## with backoff when it exits, and gives up (`failed`) after the last try.
##
## A launch that never started (a program that is not there or not executable, or a sidecar that
## exits before it ever answered) is FAILED at once with one line naming the command and the fix:
## a restart would only meet the same problem. Only a sidecar that has answered is restarted.
##
## LoreguardClient speaks the protocol: it calls in at each connection event (`connection_ready`,
## `vet`, `session_opened`, `connection_lost`) and handles the requests this class's signals
## concern, so no request is ever touched here.

## The status changed: starting, downloading_model and loading_model (with progress), ready,
## restarting, failed. LoreguardClient re-emits it as its own `status_changed`.
signal status_changed(status: LoreguardSidecarStatus)
## The sidecar cannot be used as it is: one line (LoreguardClient's `sidecar_problem`).
signal problem_found(message: String)
## The launched sidecar exited or could not start: what was on the wire to it is lost.
signal exited(why: String)
## No restart is left: the status is FAILED and requests waiting for a connection are refused.
signal gave_up(why: String)

## How long `start()` waits for `hello` before it launches the sidecar (when auto-launch is on).
const LAUNCH_PROBE_MS := 1500
## How long the check of a sidecar found on the port (its `hello`) may take.
const VET_TIMEOUT_MS := 5000
## The states a launched sidecar's download and loading lines may move the status between.
const _LAUNCHING: Array[LoreguardSidecarStatus.State] = [
	LoreguardSidecarStatus.State.STARTING,
	LoreguardSidecarStatus.State.DOWNLOADING_MODEL,
	LoreguardSidecarStatus.State.LOADING_MODEL,
]

## The sidecar's address; it moves to a free port when a sidecar this game did not launch holds
## the configured one.
var address: String = ""
## Where the sidecar stands; `status_changed` reports every change.
var status: LoreguardSidecarStatus = LoreguardSidecarStatus.new()
## The connection may carry requests: always for an explicitly configured sidecar; with
## auto-launch, once `vet` accepted what answers on it.
var vetted: bool = false
## The sidecar process this game launched: its lifeline, exit and log.
var supervisor: LoreguardSupervisor
## The client's connection: opened, moved to another port and hurried here.
var dealer: LoreguardDealer

## Auto-launch: only a sidecar this game launched (or one explicitly reused) may be used.
var _managed: bool = false
var _launch_port: int = 0
## Until when `start()` waits for an existing sidecar before launching; -1: not waiting.
var _probe_until_ms: int = -1
## When the next restart is due; -1: none scheduled.
var _restart_at_ms: int = -1
var _restarts: int = 0
# Where the vetted sidecar's model runs, from its `hello` ("" for a remote or scripted model).
var _device := ""
## When the sidecar now loading was launched, or finished downloading its model (the status
## counts the seconds from it); -1: none.
var _launched_at_ms: int = -1
## Why the launched sidecar cannot start however often it is restarted (its model is not
## installed and may not be downloaded), as its log said; "" otherwise.
var _launch_problem: String = ""
# With `_launch_problem`: the FAILED status's `cause` (LoreguardSidecarStatus.SAVE_IN_USE), or "".
var _launch_cause: String = ""
# The sidecar's line for a --model that is not installed, without --yes (server/models/resolve.py).
var _not_installed_line := RegEx.create_from_string("^loreguard: (.+) is not installed: ")
# The sidecar's line when another sidecar holds its data folder (memory/folder_lock.py; exit code 4).
var _folder_in_use_line := RegEx.create_from_string("is in use by another Loreguard sidecar \\((.*)\\);")


func _init(connection: LoreguardDealer, process: LoreguardSupervisor) -> void:
	dealer = connection
	supervisor = process
	supervisor.loading.connect(_on_loading)
	supervisor.downloading.connect(_on_downloading)
	supervisor.log_line.connect(_on_sidecar_log)


## Opens the connection to `to_address`. With `auto_launch`, launches the sidecar when none
## answers within LAUNCH_PROBE_MS (see `poll`).
func start(to_address: String, auto_launch: bool) -> void:
	address = to_address
	_managed = auto_launch
	vetted = not auto_launch
	_restarts = 0
	_restart_at_ms = -1
	supervisor.answered = false
	var open_problem := dealer.open(address)
	if not open_problem.is_empty():
		push_error("Loreguard: " + open_problem)
		_set_status(LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.FAILED, open_problem))
		return
	_launch_port = dealer.port
	_set_status(LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.STARTING, "connecting to " + address))
	_probe_until_ms = Time.get_ticks_msec() + LAUNCH_PROBE_MS if auto_launch else -1


## Launches the project's launch command (or the bundle's) on the port, through the supervisor.
## False when it cannot: a bundle problem or a program that cannot run is FAILED at once.
func launch() -> bool:
	if supervisor.pid > 0:
		return true
	_probe_until_ms = -1
	var command := LoreguardSettings.launch_command()
	if LoreguardBundle.in_use():
		var bundle := LoreguardBundle.folder()
		var bundle_problem := LoreguardBundle.problem(bundle)
		if not bundle_problem.is_empty():
			# A restart cannot fix a missing or mismatched bundle: say so once and stop.
			problem_found.emit(bundle_problem)
			_set_status(LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.FAILED, bundle_problem))
			return false
		command = LoreguardBundle.launch_command(bundle, address)
	_launch_problem = ""
	_launch_cause = ""
	var launch_problem := supervisor.launch(command, _launch_port)
	if not launch_problem.is_empty():
		var tried := " `%s`" % " ".join(command) if not command.is_empty() else ""
		_never_started("cannot start the sidecar%s: %s. %s" % [tried, launch_problem, _launch_fix(false)])
		return false
	_launched_at_ms = Time.get_ticks_msec()
	var loading := LoreguardSidecarStatus.new(
		LoreguardSidecarStatus.State.LOADING_MODEL, "launched (pid %d, port %d)" % [supervisor.pid, _launch_port]
	)
	_set_status(loading)
	return true


## Stops the launched sidecar and any restart that was due.
func stop() -> void:
	_restart_at_ms = -1
	supervisor.stop()


## Something answers on the port: no more waiting to launch; `vet` decides whether to use it.
func connection_ready() -> void:
	_probe_until_ms = -1


## Whether the sidecar whose `hello` gave `hello_result` may carry requests: the one this game
## launched (its launch token), or with `reuse_running` any, while none is launched. Anything else
## is left alone, and this game's own sidecar is launched on a free port instead.
func vet(hello_result: LoreguardResult) -> bool:
	var body := hello_result.body
	if hello_result.ok and (supervisor.owns(body) or supervisor.pid < 0 and LoreguardSettings.reuse_running()):
		vetted = true
		_device = LoreguardSidecarStatus.device_of(body)
		return true
	var who := (
		"a sidecar (%s) not started by this game" % body.get("server", "?")
		if hello_result.ok
		else "something that does not answer hello (%s)" % hello_result.error
	)
	_move_away_from(who)
	return false


## The client sent the designer data over a vetted connection: READY, and restarts count anew.
func session_opened() -> void:
	_restarts = 0
	if supervisor.pid > 0:
		supervisor.answered = true  # from now on an exit is a crash, worth a restart
	_set_status(_ready_status())


## An interaction's reply came back: whether its model answered (`backend_failure` of its receipt,
## "" when the model answered). "unreachable" turns READY into MODEL_UNREACHABLE; a reply from the
## model turns it back.
func model_answered(backend_failure: String, why: String) -> void:
	var state := status.state
	if backend_failure == "unreachable" and state == LoreguardSidecarStatus.State.READY:
		_set_status(LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.MODEL_UNREACHABLE, why))
	elif backend_failure.is_empty() and state == LoreguardSidecarStatus.State.MODEL_UNREACHABLE:
		_set_status(_ready_status())


func _ready_status() -> LoreguardSidecarStatus:
	var ready := LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.READY, "connected to " + address)
	ready.device = _device
	if _device != "":
		ready.reason += "; the model runs on " + _device
	return ready


## The connection dropped (the client has already failed what was in flight).
func connection_lost() -> void:
	if _managed:
		vetted = false  # whatever answers on the port next is checked again
		if supervisor.pid < 0 and _probe_until_ms >= 0:
			launch()  # nothing listens there: no need to wait out the probe
	if status.state in [LoreguardSidecarStatus.State.READY, LoreguardSidecarStatus.State.MODEL_UNREACHABLE]:
		var why := "lost the connection to %s: %s" % [address, dealer.last_error]
		_set_status(LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.RESTARTING, why))


## Each frame: the launched sidecar's exit and loading seconds, and a restart or launch that is due.
func poll(now_ms: int) -> void:
	if not _managed:
		return
	if supervisor.poll(now_ms):
		_on_exit()
	elif status.state == LoreguardSidecarStatus.State.LOADING_MODEL and _launched_at_ms >= 0:
		# Every second of the wait is reported, also before the sidecar's first progress line
		# (starting Python and importing llama.cpp takes seconds of its own).
		var seconds := (now_ms - _launched_at_ms) / 1000
		if seconds > int(status.loading_s):
			_on_loading(float(seconds), status.loading_what)
	if _restart_at_ms >= 0 and now_ms >= _restart_at_ms:
		_restart_at_ms = -1
		launch()
	elif _probe_until_ms >= 0 and now_ms >= _probe_until_ms and not vetted:
		launch()  # nothing answered on the port in time


## Launches this game's own sidecar on a free port, leaving `who` on the configured one alone.
func _move_away_from(who: String) -> void:
	var port := LoreguardSupervisor.free_port()
	var conflict := "%s answers on %s" % [who, address]
	if port <= 0:
		dealer.close()
		_set_status(LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.FAILED, conflict + "; no free port"))
		return
	push_warning(
		(
			(
				"Loreguard: %s; it may be left over from an earlier run. This game launches its own on port %d."
				+ " To use a sidecar you started yourself, turn off loreguard/sidecar/auto_launch"
				+ " or turn on loreguard/sidecar/reuse_running."
			)
			% [conflict, port]
		)
	)
	supervisor.stop()
	_launch_port = port
	address = "tcp://%s:%d" % [dealer.host, port]
	dealer.close()
	dealer.open(address)
	launch()


## The launched sidecar exited: what was in flight is lost. One that never answered is FAILED at
## once; one that had answered is restarted with backoff, until the restarts run out.
func _on_exit() -> void:
	vetted = false
	if not _launch_problem.is_empty():
		# Its log named a missing model: say what to do instead of what happened.
		_never_started(_launch_problem)
		return
	var last := supervisor.last_log_line
	# A port still held by the last sidecar (shutting down) frees itself: that one is retried.
	if not supervisor.answered and not last.contains("already in use"):
		# Most often a bad argument or a model it cannot load: a restart would meet it again.
		var details := PackedStringArray()
		if supervisor.exit_code >= 0:
			details.append("exit code %d" % supervisor.exit_code)
		if not last.is_empty():
			details.append("its last log line: " + last)
		var said := " (%s)" % "; ".join(details) if not details.is_empty() else ""
		_never_started("the sidecar exited before it answered%s. %s" % [said, _launch_fix(true)])
		return
	var why := "the sidecar exited" + (" (its last log line: %s)" % last if not last.is_empty() else "")
	exited.emit(why)
	var delays := LoreguardSupervisor.RESTART_DELAYS_MS
	if _restarts >= delays.size():
		problem_found.emit(why)  # once, when the restarts are spent
		_give_up(why)
		return
	_restart_at_ms = Time.get_ticks_msec() + int(delays[_restarts])
	_restarts += 1
	var restarting := LoreguardSidecarStatus.State.RESTARTING
	_set_status(LoreguardSidecarStatus.new(restarting, why, _restarts, delays.size()))


## What a developer does about a launch command that did not start a sidecar: the setting (or the
## environment variable) that holds it and where `loreguard` usually is; when the program `ran`
## but exited at once, first how to see why.
func _launch_fix(ran: bool) -> String:
	if LoreguardBundle.in_use():
		var look := "run `%s` in a terminal to see why, or " % supervisor.command_line if ran else ""
		return (
			"Fix: %srebuild the bundle with `loreguard bundle` and put it at %s (loreguard/sidecar/bundle_path)"
			% [look, LoreguardBundle.folder()]
		)
	var source := (
		"the environment variable LOREGUARD_LAUNCH_COMMAND"
		if OS.has_environment("LOREGUARD_LAUNCH_COMMAND")
		else "the project setting " + LoreguardSettings.LAUNCH_COMMAND
	)
	if ran:
		return (
			"Fix: run `%s` in a terminal to see why, then correct %s; or set %s to bundle (docs/shipping.md)"
			% [supervisor.command_line, source, LoreguardBundle.LAUNCH_MODE]
		)
	return (
		(
			"Fix: set %s to a loreguard this game can run, e.g. `<your Loreguard checkout>/.venv/bin/loreguard"
			+ " serve --port 7878` after ./dev, or `loreguard serve --port 7878` after `pip install loreguard`"
			+ " (with its full path, from `which loreguard`, when Godot was not started from that shell);"
			+ " or set %s to bundle (docs/shipping.md)"
		)
		% [source, LoreguardBundle.LAUNCH_MODE]
	)


## A launch that never started (see the class doc): one line on the status and in the log, no
## restart.
func _never_started(why: String) -> void:
	vetted = false
	_restart_at_ms = -1
	problem_found.emit(why)
	exited.emit(why)
	_give_up(why, _launch_cause)


## FAILED: the client then fails requests at once with `sidecar_down`, except designer data.
func _give_up(why: String, cause: String = "") -> void:
	var failed := LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.FAILED, why)
	failed.cause = cause
	_set_status(failed)
	gave_up.emit(why)


func _on_downloading(file: String, done_mib: float, total_mib: float) -> void:
	if status.state not in _LAUNCHING:
		return
	var downloading := LoreguardSidecarStatus.new(
		LoreguardSidecarStatus.State.DOWNLOADING_MODEL, "downloading " + file
	)
	downloading.loading_what = file
	downloading.download_done_mib = done_mib
	downloading.download_total_mib = total_mib
	_set_status(downloading)


func _on_loading(_sidecar_seconds: float, what: String) -> void:
	if status.state not in _LAUNCHING:
		return
	if status.state == LoreguardSidecarStatus.State.DOWNLOADING_MODEL:
		_launched_at_ms = Time.get_ticks_msec()  # the loading seconds count from the download's end
	var reason := "loading " + what if not what.is_empty() else status.reason
	var loading := LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.LOADING_MODEL, reason)
	# Counted from the launch, so the number never jumps back when the sidecar starts counting.
	loading.loading_s = ((Time.get_ticks_msec() - _launched_at_ms) / 1000.0 if _launched_at_ms >= 0 else 0.0)
	loading.loading_what = what
	var same := status.state == LoreguardSidecarStatus.State.LOADING_MODEL and status.loading_what == what
	if same and int(loading.loading_s) == int(status.loading_s):
		return  # ticks come four times a second; the status changes once a second
	_set_status(loading)


func _on_sidecar_log(line: String) -> void:
	print(LoreguardSupervisor.LOG_PREFIX + line)
	var missing := _not_installed_line.search(line)
	if missing != null:
		var model := missing.get_string(1)
		_launch_problem = (
			(
				"the dialogue model %s is not installed: run `loreguard models pull %s`, or turn on the project"
				+ " setting %s to download it when the game starts"
			)
			% [model, model, LoreguardSettings.ALLOW_MODEL_DOWNLOAD]
		)
	var in_use := _folder_in_use_line.search(line)
	if in_use != null:
		# Not a broken launch: the save belongs to another copy of the game while it runs.
		_launch_problem = (
			"another copy of the game is using this save (its sidecar: %s); close that copy, then start again"
			% in_use.get_string(1)
		)
		_launch_cause = LoreguardSidecarStatus.SAVE_IN_USE
	if line.contains("listening on"):
		dealer.retry_now()  # bound: connect now rather than after the reconnect backoff


func _set_status(new_status: LoreguardSidecarStatus) -> void:
	status = new_status
	print_verbose("Loreguard: sidecar %s" % new_status)
	status_changed.emit(new_status)
