"""`loreguard serve`: the sidecar, protocol v1 on a ZeroMQ ROUTER socket; and `loreguard cache`,
the evaluated prompts it keeps in its data folder."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from loreguard.server.models.backends import BackendChoice, model_backend
from loreguard.server.models.cli import add_model_options, backend_choice

if TYPE_CHECKING:
    from loreguard.memory import DataFolderLock
    from loreguard.server.sidecar.serve import JudgeSetup

_T = TypeVar("_T")

#: The prompt cache's folder inside the data folder (`loreguard cache`).
PROMPT_CACHE = "prompt-cache"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `serve` to `loreguard`'s subcommands."""
    serve = commands.add_parser("serve", help="run the sidecar: protocol v1 on a ZeroMQ ROUTER socket")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    serve.add_argument("--port", type=int, default=7878)
    serve.add_argument(
        "--data", default="loreguard-data",
        help="folder for memory (SQLite) and audit records; one sidecar owns it at a time (a second exits with code 4)",
    )  # fmt: skip
    serve.add_argument(
        "--audit-keep", type=_at_least_one, default=1000,
        help="audit records kept per NPC, the newest (docs/long-play.md); older ones are archived to --audit-archive, then pruned",
    )  # fmt: skip
    serve.add_argument(
        "--audit-archive", default=None,
        help="folder for pruned audit records as debug packages (default: DATA/audit-archive; 'none': prune without a copy)",
    )  # fmt: skip
    serve.add_argument(
        "--backend", choices=["llama", "openai", "scripted"], default="llama",
        help="in-process llama.cpp (default), an OpenAI-compatible HTTP server, or recorded outputs replayed in a loop",
    )  # fmt: skip
    serve.add_argument("--script", help="scripted backend: a JSON file with a list of model outputs")
    serve.add_argument(
        "--script-latency-ms", type=int, default=0, help="scripted backend: each line takes this long, like a model's"
    )
    serve.add_argument(
        "--base-url", default="http://127.0.0.1:8080",
        help="openai backend: the model server's URL (llama-server, vLLM, SGLang, llama_cpp.server; docs/remote-engines.md); "
        "--model then names the model it serves (default: its first) and --parallel its slots where it does not say",
    )  # fmt: skip
    serve.add_argument(
        "--chat-template",
        help="openai backend: the served model's chat template (chatml, gemma, a GGUF file or catalogue name, embedded), "
        "for raw completions: the in-process engine's prompt bytes, and retries that continue what the player saw",
    )
    add_model_options(serve, engine=True)
    serve.add_argument("--queue-size", type=int, default=64, help="queued interactions before `overloaded`")
    serve.add_argument("--max-message-bytes", type=int, default=1 << 20)
    serve.add_argument("--timeout-ms", type=int, default=60_000, help="deadline of one interaction")
    serve.add_argument(
        "--judge", choices=["auto", "off", "keyword", "model"], default="auto",
        help="the semantic judge gate: the NPC's own model asked about each reply (model), its keyword check only, "
        "off, or auto (the default): model for a catalogue model marked judge-capable (1.5B and up), else off",
    )  # fmt: skip
    serve.add_argument(
        "--judge-model", help="--judge model: a GGUF, catalogue name or hf:REPO/FILE for the judge (default: the dialogue model)"
    )
    serve.add_argument("--judge-url", help="--judge model: an OpenAI-compatible server for the judge instead")
    serve.add_argument("--judge-timeout-ms", type=int, default=3000, help="how long the judge model may take (default 3000)")
    serve.add_argument("--parent-pid", type=int, help="exit when this process (the game that launched the sidecar) dies")
    serve.add_argument("--stop-file", help="with --parent-pid: stop cleanly (replies sent, memory flushed) once this file exists")
    serve.add_argument("--launch-token", help="echoed in `hello`, so the launcher knows this sidecar is the one it started")
    serve.add_argument(
        "--stall-limit-s", type=float, default=120.0,
        help="on a GPU, exit (code 3) when one model call has not returned in this long: a driver that stopped answering (0: never)",
    )  # fmt: skip
    serve.add_argument(
        "--prompt-cache-mib", type=int, default=1024,
        help="disk for NPCs' evaluated prompts kept across launches in DATA/prompt-cache, least recently used out "
        "(0: none; `loreguard cache list|clear`)",
    )  # fmt: skip
    serve.add_argument("--log-file", help="append all output here instead of the terminal (a launching game tails it)")
    serve.set_defaults(handler=_serve)

    cache = commands.add_parser("cache", help="NPCs' evaluated prompts kept across launches (DATA/prompt-cache)")
    cache_commands = cache.add_subparsers(dest="cache_command", required=True)
    for name, about in (("list", "one line per NPC: tokens, size, model, last use"), ("clear", "delete them all")):
        sub = cache_commands.add_parser(name, help=about)
        sub.add_argument("--data", default="loreguard-data", help="the sidecar's data folder (default loreguard-data)")
        sub.set_defaults(handler=_cache)


def _serve(args: argparse.Namespace) -> int:
    from loreguard.memory import DataFolderLock
    from loreguard.server.sidecar.serve import EXIT_FOLDER_IN_USE, take_data_folder

    if args.log_file:  # first, so a bad argument's message reaches the launching game too
        _redirect_output(Path(args.log_file))
    # An existing save is locked before the model is chosen (which may download it for minutes):
    # a second sidecar on it refuses in a second. A new folder is made and locked once the model
    # is loaded (`serve`), so a bad argument leaves nothing behind. The OS releases the lock when
    # this process ends, however it ends.
    owner = DataFolderLock(Path(args.data))
    if owner.folder.is_dir() and not take_data_folder(owner):
        return EXIT_FOLDER_IN_USE
    try:
        return _serve_owned(args, owner)
    finally:
        owner.release()


def _serve_owned(args: argparse.Namespace, owner: DataFolderLock) -> int:
    from loreguard.server.audit.retention import AuditRetention
    from loreguard.server.sidecar.serve import serve
    from loreguard.server.sidecar.transport import SidecarConfig

    stop_file = Path(args.stop_file) if args.stop_file else None
    choice = backend_choice(args)
    if args.prompt_cache_mib > 0:
        choice = replace(choice, prompt_cache_dir=str(Path(args.data) / PROMPT_CACHE), prompt_cache_mib=args.prompt_cache_mib)
    what, load = _with_lifeline(args.parent_pid, lambda: model_backend(choice), stop_file)
    config = SidecarConfig(
        host=args.host,
        port=args.port,
        max_message_bytes=args.max_message_bytes,
        queue_size=args.queue_size,
        request_timeout_ms=args.timeout_ms,
        launch_token=args.launch_token,
        audit_retention=AuditRetention(keep_per_npc=args.audit_keep, archive=_archive(args)),
    )
    return serve(
        load, what, Path(args.data), config, judge=_judge_setup(args, what), parent_pid=args.parent_pid,
        stall_limit_s=args.stall_limit_s, stop_file=stop_file, owner=owner,
    )  # fmt: skip


def _cache(args: argparse.Namespace) -> int:
    from loreguard.memory import DataFolderLock
    from loreguard.server.sidecar.prompt_cache import cached_prompts, clear, describe
    from loreguard.server.sidecar.serve import EXIT_FOLDER_IN_USE, take_data_folder

    folder = Path(args.data) / PROMPT_CACHE
    if args.cache_command == "list":
        entries = list(cached_prompts(folder))
        for entry in entries:
            print(describe(entry))
        print(f"prompt_cache: {folder} ({len(entries)} files, {sum(e.size_bytes for e in entries) / 2**20:.1f} MiB)")
        return 0
    owner = DataFolderLock(Path(args.data))
    if owner.folder.is_dir() and not take_data_folder(owner):  # a running sidecar is using these files
        return EXIT_FOLDER_IN_USE
    try:
        files, freed = clear(folder)
    finally:
        owner.release()
    print(f"cleared: {files} files, {freed / 2**20:.1f} MiB from {folder}")
    return 0


def _at_least_one(text: str) -> int:
    """A count of 1 or more (argparse says which option and exits 2 otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must keep at least 1 record per NPC (got {value}); the newest is what a replay needs")
    return value


def _archive(args: argparse.Namespace) -> Path | None:
    if args.audit_archive == "none":
        return None
    return Path(args.audit_archive) if args.audit_archive else Path(args.data) / "audit-archive"


def _with_lifeline(parent_pid: int | None, step: Callable[[], _T], stop_file: Path | None = None) -> _T:
    """Run `step` (which may download a model for minutes) and exit at once if the launching game
    dies or asks to stop meanwhile: `serve` watches the game itself only from when it starts
    loading."""
    if parent_pid is None:
        return step()
    import os

    from loreguard.server.sidecar.lifeline import ParentWatch, is_alive

    if not is_alive(parent_pid):
        print(f"the launching process {parent_pid} is not running; not starting", file=sys.stderr, flush=True)
        raise SystemExit(1)
    watch = ParentWatch(parent_pid, lambda: os._exit(0), stop_file=stop_file).start()
    try:
        return step()
    finally:
        watch.stop()


def _redirect_output(path: Path) -> None:
    """Send stdout and stderr, native libraries' included (llama.cpp logs on fd 2), to `path`:
    a launching game tails it (progress, log lines) since it cannot read a child's pipes."""
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _on_gpu(args: argparse.Namespace) -> bool:
    """Whether the dialogue model runs on a GPU (`--device`, `--gpu-layers`)."""
    from loreguard.server.inference.devices import DeviceError, choose_device

    try:
        return choose_device(args.device, args.gpu_layers).gpu_layers != 0
    except DeviceError:  # already refused when the model was chosen; here only a question
        return False


def _judge_setup(args: argparse.Namespace, what: str) -> JudgeSetup:
    from loreguard.server.models.catalogue import load_catalogue
    from loreguard.server.sidecar.serve import JudgeSetup

    if args.judge == "auto":
        if args.judge_model or args.judge_url:
            raise SystemExit("--judge-model and --judge-url need --judge model")
        entry = load_catalogue().get(what) if args.backend == "llama" else None
        capable = entry is not None and entry.judge_capable
        if capable and not _on_gpu(args):
            # Measured (README, "The semantic judge"): the 1.5B's question on 2 CPU cores costs about what its reply
            # does, so a judge there doubles the player's wait; on a GPU it is a fraction of it.
            because = f"since on the CPU asking {what} about each reply would about double the wait for it"
            return JudgeSetup(mode="off", timeout_ms=args.judge_timeout_ms, off_because=because)
        return JudgeSetup(mode="model" if capable else "off", timeout_ms=args.judge_timeout_ms, what=f"{what} (judge-capable)")
    if args.judge != "model" or not (args.judge_model or args.judge_url):
        if args.judge_model or args.judge_url:
            raise SystemExit("--judge-model and --judge-url need --judge model")
        if args.judge == "model" and args.backend == "scripted":
            raise SystemExit(
                "--judge model with --backend scripted would feed the judge the script: add --judge-model or --judge-url"
            )
        return JudgeSetup(mode=args.judge, timeout_ms=args.judge_timeout_ms)
    if args.judge_model and args.judge_url:
        raise SystemExit("--judge-model and --judge-url: pick one")
    if args.judge_url:
        choice = BackendChoice(kind="openai", base_url=args.judge_url, timeout_s=args.judge_timeout_ms / 1000)
        what, load = model_backend(choice)
        return JudgeSetup(mode="model", timeout_ms=args.judge_timeout_ms, factory=load, what=f"remote judge at {args.judge_url}")
    choice = BackendChoice(
        model=args.judge_model,
        assume_yes=args.yes,
        memory_budget_mib=args.memory_budget_mib,
        gpu_layers=args.gpu_layers,
        device=args.device,
        parallel=2,
        for_game=bool(args.log_file),
    )
    what, load = model_backend(choice)
    return JudgeSetup(mode="model", timeout_ms=args.judge_timeout_ms, factory=load, what=what)
