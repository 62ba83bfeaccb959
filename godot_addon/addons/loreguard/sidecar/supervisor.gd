class_name LoreguardSupervisor
extends RefCounted
## The sidecar process the `Loreguard` autoload launched: starts it with this game's lifeline,
## notices when it exits, and tails its log.
##
## The lifeline is four arguments added to the launch command (`loreguard serve …`):
## `--parent-pid` (the sidecar exits by itself when this game dies, even by SIGKILL from the
## editor's Stop button), `--stop-file` (`stop` creates it: the sidecar shuts down cleanly, its
## replies sent and memory flushed; Godot has no SIGTERM, and SIGKILL would leave the memory
## file's WAL behind), `--launch-token` (echoed in `hello`, so a sidecar found on the port is
## known to be this game's and not a stale or foreign one) and `--log-file` (the game cannot read
## a child's pipes without blocking, so it tails this file: loading progress and log lines).
## The client decides what to do about an exit (LoreguardClient restarts with backoff).

## A log line of the sidecar (progress ticks excluded).
signal log_line(line: String)
## The sidecar is loading `what`, `seconds` so far.
signal loading(seconds: float, what: String)
## The sidecar is downloading `file`: `done_mib` of `total_mib` (0: size unknown).
signal downloading(file: String, done_mib: float, total_mib: float)

## How often the process and its log are looked at.
const POLL_MS := 100
## Waits before each restart; their count bounds the restarts before the client gives up.
const RESTART_DELAYS_MS := [300, 1000, 2000, 4000, 8000]
## How long `stop` waits for the sidecar to shut down cleanly before it kills it: enough for an
## idle sidecar (about half a second), not for a reply still being generated.
const STOP_GRACE_MS := 5000
## Prefix of the sidecar's log lines in the Output panel.
const LOG_PREFIX := "[loreguard sidecar] "

## Echoed by the sidecar this game launched; random per game run.
var token: String
## The launched process, or -1.
var pid: int = -1
## The port the launched sidecar listens on.
var port: int = 0
## The file the launched sidecar writes its output to (under user://loreguard/).
var log_path: String = ""
## The last log line, the best explanation when the sidecar exits on its own.
var last_log_line: String = ""
## The launched process's exit code once it exited; -1 while it runs or when the OS did not say.
var exit_code: int = -1
## The command of the last launch without the lifeline arguments, as messages name it.
var command_line: String = ""
## A sidecar this supervisor launched has answered (the launcher says so when it is ready). An
## exit after that is a crash a restart may cure; an exit before it is a launch that never
## started (a bad argument, a model it cannot load), which a restart would only repeat.
var answered: bool = false

var _log: FileAccess
# The file whose appearance asks the launched sidecar to stop (see `stop`).
var _stop_path: String = ""
var _log_rest: String = ""
var _next_poll_ms: int = 0
# A progress tick; native libraries may append their own output to it (no newline between).
var _loading_line := RegEx.create_from_string("^loading (.+?) \\.\\.\\. +([0-9.]+) s(.*)$")
# A download's progress line (server/models/pull.py): "downloading F: 40% (426.1/1065.6 MiB)",
# or "downloading F: 426.1 MiB" when the Hub did not say the size.
var _download_line := RegEx.create_from_string(
	"^downloading (.+?): (?:[0-9]+% \\(([0-9.]+)/([0-9.]+) MiB\\)|([0-9.]+) MiB)$"
)


func _init() -> void:
	token = Crypto.new().generate_random_bytes(12).hex_encode()


## `command` with its `--port` replaced by `to_port` and the lifeline arguments added.
static func with_lifeline(
	command: PackedStringArray,
	to_port: int,
	parent_pid: int,
	launch_token: String,
	log_file: String,
	stop_file: String = ""
) -> PackedStringArray:
	var out := PackedStringArray()
	var i := 0
	while i < command.size():
		if command[i] == "--port":
			i += 2
			continue
		if not command[i].begins_with("--port="):
			out.append(command[i])
		i += 1
	out.append_array(
		[
			"--port",
			str(to_port),
			"--parent-pid",
			str(parent_pid),
			"--launch-token",
			launch_token,
			"--log-file",
			log_file
		]
	)
	if not stop_file.is_empty():
		out.append_array(["--stop-file", stop_file])
	return out


## A TCP port on loopback that nothing listens on right now (for a sidecar beside a foreign one).
static func free_port() -> int:
	var server := TCPServer.new()
	if server.listen(0, "127.0.0.1") != OK:
		return -1
	var found := server.get_local_port()
	server.stop()
	return found


## Whether a `hello` reply body comes from the sidecar this game launched.
func owns(hello_body: Dictionary) -> bool:
	return str(hello_body.get("launch_token", "")) == token


## Why `program` (a launch command's first part) cannot be run, or "" when it can: not found on
## the PATH, no such file, a folder, or a file without the executable bit.
static func program_problem(program: String) -> String:
	var windows := OS.get_name() == "Windows"
	var is_path := program.contains("/") or windows and program.contains("\\")
	var suffixes := PackedStringArray([""])
	if windows:
		suffixes.append_array(OS.get_environment("PATHEXT").to_lower().split(";", false))
	# As execvp looks: a path as it is, a bare name in each PATH folder in turn.
	var folders := (
		PackedStringArray([""]) if is_path else OS.get_environment("PATH").split(";" if windows else ":", false)
	)
	var not_executable := ""
	for folder in folders:
		for suffix in suffixes:
			var candidate := folder.path_join(program + suffix) if not folder.is_empty() else program + suffix
			if not FileAccess.file_exists(candidate):
				continue
			# Any of the three execute bits (Windows has none: the PATHEXT suffix decides).
			if windows or FileAccess.get_unix_permissions(candidate) & 0b001_001_001 != 0:
				return ""
			not_executable = candidate
	if not not_executable.is_empty():
		return "%s is not executable (chmod +x %s)" % [not_executable, not_executable]
	if not is_path:
		return "`%s` is not on the PATH this game was started with" % program
	if DirAccess.dir_exists_absolute(program):
		return "%s is a folder, not a program" % program
	return "%s does not exist" % program


## Starts `command` on `on_port`; "" on success, else why not (it cannot have started).
func launch(command: PackedStringArray, on_port: int) -> String:
	stop()
	exit_code = -1
	last_log_line = ""
	if command.is_empty():
		return "no launch command (project setting loreguard/sidecar/launch_command)"
	command_line = " ".join(command)
	# Checked here: a program that is not there still forks, and the child's only trace is
	# Godot's own "Could not create child process" line.
	var not_runnable := program_problem(command[0])
	if not not_runnable.is_empty():
		return not_runnable
	port = on_port
	var dir := OS.get_user_data_dir().path_join("loreguard")
	DirAccess.make_dir_recursive_absolute(dir)
	log_path = dir.path_join("sidecar-%s.log" % token)
	# A fresh log per launch: the tail reads it from the start.
	var fresh := FileAccess.open(log_path, FileAccess.WRITE)
	if fresh != null:
		fresh.close()
	_stop_path = dir.path_join("sidecar-%s.stop" % token)
	if FileAccess.file_exists(_stop_path):
		DirAccess.remove_absolute(_stop_path)
	var argv := with_lifeline(command, port, OS.get_process_id(), token, log_path, _stop_path)
	pid = OS.create_process(argv[0], argv.slice(1))
	if pid <= 0:
		pid = -1
		return "the system could not start it"
	print_verbose("Loreguard: launched the sidecar (pid %d): %s" % [pid, " ".join(argv)])
	return ""


## Looks at the process and its log (every POLL_MS); true once, when the launched process exited.
func poll(now_ms: int) -> bool:
	if pid < 0 or now_ms < _next_poll_ms:
		return false
	_next_poll_ms = now_ms + POLL_MS
	read_log()
	if OS.is_process_running(pid):
		return false
	read_log()
	exit_code = OS.get_process_exit_code(pid)
	pid = -1
	return true


## Stops the launched sidecar (if it still runs) and removes its log: asks it to shut down
## cleanly, waits up to `grace_ms` (its last log lines reach the Output panel), then kills it.
func stop(grace_ms: int = STOP_GRACE_MS) -> void:
	if pid > 0 and OS.is_process_running(pid):
		var asked := FileAccess.open(_stop_path, FileAccess.WRITE) if not _stop_path.is_empty() else null
		if asked != null:
			asked.close()
			var until := Time.get_ticks_msec() + grace_ms
			while OS.is_process_running(pid) and Time.get_ticks_msec() < until:
				OS.delay_msec(20)
		if OS.is_process_running(pid):
			OS.kill(pid)
	pid = -1
	if not _stop_path.is_empty() and FileAccess.file_exists(_stop_path):
		DirAccess.remove_absolute(_stop_path)
	read_log()
	_log = null
	_log_rest = ""
	if not log_path.is_empty() and FileAccess.file_exists(log_path):
		DirAccess.remove_absolute(log_path)


## Emits `loading` and `log_line` for what the sidecar wrote to `log_path` since the last call.
func read_log() -> void:
	if log_path.is_empty():
		return
	if _log == null:
		_log = FileAccess.open(log_path, FileAccess.READ)
		if _log == null:
			return
	var unread := _log.get_length() - _log.get_position()
	if unread <= 0:
		return
	# Progress ticks rewrite their line with \r; each tick counts as a line here.
	var lines := (_log_rest + _log.get_buffer(unread).get_string_from_utf8()).replace("\r", "\n").split("\n")
	_log_rest = lines[lines.size() - 1]
	lines.remove_at(lines.size() - 1)
	for raw in lines:
		var line := raw.strip_edges()
		if line.is_empty():
			continue
		var tick := _loading_line.search(line)
		if tick != null:
			loading.emit(float(tick.get_string(2)), tick.get_string(1))
			line = tick.get_string(3).strip_edges()
			if line.is_empty():
				continue
		last_log_line = line
		var download := _download_line.search(line)
		if download != null:
			# A line per percent: a status, not a line in the Output panel.
			var done := download.get_string(2) if download.get_string(2) != "" else download.get_string(4)
			downloading.emit(download.get_string(1), float(done), float(download.get_string(3)))
			continue
		log_line.emit(line)
