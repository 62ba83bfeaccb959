extends "res://tests/check_run.gd"
## LoreguardSupervisor's pure parts (tests/godot_addon/test_supervision.py): the lifeline
## arguments added to a launch command, and the sidecar's log read back as loading progress and
## log lines, progress ticks rewritten with \r included, and download progress lines; and why a
## launch command's program cannot run, found before anything is started.

var ticks: Array = []
var lines: PackedStringArray = []
var downloads: Array = []


func _init() -> void:
	_test_lifeline()
	_test_log()
	_test_download_lines()
	_test_program_problem()
	_finish()


func _test_lifeline() -> void:
	var command := PackedStringArray(["loreguard", "serve", "--port", "7878", "--data", "d", "--port=1"])
	var argv := LoreguardSupervisor.with_lifeline(command, 4242, 99, "tok", "/tmp/x.log")
	_expect(
		(
			argv
			== PackedStringArray(
				[
					"loreguard",
					"serve",
					"--data",
					"d",
					"--port",
					"4242",
					"--parent-pid",
					"99",
					"--launch-token",
					"tok",
					"--log-file",
					"/tmp/x.log"
				]
			)
		),
		"the port replaced, the lifeline added",
		str(argv)
	)
	var stoppable := LoreguardSupervisor.with_lifeline(command, 4242, 99, "tok", "/tmp/x.log", "/tmp/x.stop")
	_expect(
		stoppable.slice(-2) == PackedStringArray(["--stop-file", "/tmp/x.stop"]),
		"a stop file the sidecar watches",
		str(stoppable)
	)
	var supervisor := LoreguardSupervisor.new()
	_expect(supervisor.token.length() == 24 and supervisor.token != LoreguardSupervisor.new().token, "a random token")
	_expect(supervisor.owns({"launch_token": supervisor.token}), "owns a hello with its token")
	_expect(not supervisor.owns({"launch_token": null}) and not supervisor.owns({}), "not one without")
	_expect(LoreguardSupervisor.free_port() > 0, "a free port")


func _test_log() -> void:
	var supervisor := LoreguardSupervisor.new()
	supervisor.log_path = OS.get_user_data_dir().path_join("test-supervisor.log")
	supervisor.loading.connect(func(seconds: float, what: String) -> void: ticks.append([seconds, what]))
	supervisor.log_line.connect(func(line: String) -> void: lines.append(line))
	var file := FileAccess.open(supervisor.log_path, FileAccess.WRITE)
	file.store_string("\rloading model m.gguf ...  0.5 s\rloading model m.gguf ...  1.0 s")
	file.flush()
	supervisor.read_log()
	_expect(ticks == [[0.5, "model m.gguf"]], "a tick is read once its line ends", str(ticks))
	file.store_string("\rloaded model m.gguf in 1.1 s      \nloreguard sidecar listening on tcp://127.0.0.1:1 (da")
	file.flush()
	supervisor.read_log()
	file.store_string("ta in d); Ctrl-C stops it\n")
	file.close()
	supervisor.read_log()
	_expect(ticks.size() == 2 and ticks[1] == [1.0, "model m.gguf"], "both ticks", str(ticks))
	_expect(
		(
			lines
			== PackedStringArray(
				[
					"loaded model m.gguf in 1.1 s",
					"loreguard sidecar listening on tcp://127.0.0.1:1 (data in d); Ctrl-C stops it"
				]
			)
		),
		"log lines whole, even when written in pieces",
		str(lines)
	)
	_expect(supervisor.last_log_line.begins_with("loreguard sidecar listening"), "the last line is kept")
	DirAccess.remove_absolute(supervisor.log_path)


func _test_download_lines() -> void:
	var supervisor := LoreguardSupervisor.new()
	supervisor.log_path = OS.get_user_data_dir().path_join("test-supervisor-download.log")
	supervisor.downloading.connect(
		func(file: String, done: float, total: float) -> void: downloads.append([file, done, total])
	)
	var logged := PackedStringArray()
	supervisor.log_line.connect(func(line: String) -> void: logged.append(line))
	var file := FileAccess.open(supervisor.log_path, FileAccess.WRITE)
	file.store_string("downloading m.gguf: 0% (0.0/1065.6 MiB)\ndownloading m.gguf: 40% (426.1/1065.6 MiB)\n")
	file.store_string("downloading odd.gguf: 12.5 MiB\nverifying sha256 of m.gguf ...\n")
	file.close()
	supervisor.read_log()
	var want := [["m.gguf", 0.0, 1065.6], ["m.gguf", 426.1, 1065.6], ["odd.gguf", 12.5, 0.0]]
	_expect(downloads == want, "download lines: file, MiB done and total (0: unknown)", str(downloads))
	_expect(logged == PackedStringArray(["verifying sha256 of m.gguf ..."]), "not log lines", str(logged))
	var status := LoreguardSidecarStatus.new(LoreguardSidecarStatus.State.DOWNLOADING_MODEL)
	status.download_done_mib = 426.1
	status.download_total_mib = 1065.6
	_expect(is_equal_approx(status.download_fraction(), 0.39987), "fraction", str(status.download_fraction()))
	_expect(status.describe() == "Downloading the dialogue model… 39% (426 of 1065 MiB)", status.describe())
	_expect(status.state_name() == "downloading_model", status.state_name())
	DirAccess.remove_absolute(supervisor.log_path)


func _test_program_problem() -> void:
	if OS.get_name() == "Windows":
		return  # PATHEXT and no executable bit: not what this machine runs
	_expect(LoreguardSupervisor.program_problem("sh") == "", "a program on the PATH runs")
	_expect(LoreguardSupervisor.program_problem("/bin/sh") == "", "a path to an executable runs")
	var missing := LoreguardSupervisor.program_problem("loreguard-not-installed-here")
	_expect(
		missing == "`loreguard-not-installed-here` is not on the PATH this game was started with", "not found", missing
	)
	var gone := LoreguardSupervisor.program_problem("/nonexistent/bin/loreguard")
	_expect(gone == "/nonexistent/bin/loreguard does not exist", "a missing path", gone)
	var folder := OS.get_user_data_dir()
	_expect(LoreguardSupervisor.program_problem(folder) == "%s is a folder, not a program" % folder, "a folder")
	var plain := folder.path_join("not-executable.sh")
	var file := FileAccess.open(plain, FileAccess.WRITE)
	file.store_string("#!/bin/sh\nexit 0\n")
	file.close()
	FileAccess.set_unix_permissions(plain, FileAccess.UNIX_READ_OWNER | FileAccess.UNIX_WRITE_OWNER)
	var not_executable := LoreguardSupervisor.program_problem(plain)
	_expect(not_executable == "%s is not executable (chmod +x %s)" % [plain, plain], "not executable", not_executable)
	DirAccess.remove_absolute(plain)
