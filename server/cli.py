"""`loreguard` command line: one entry point, one subcommand per job."""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

_T = TypeVar("_T")


def _schemas_export(args: argparse.Namespace) -> int:
    from loreguard.schemas.export import export_json_schemas

    written = export_json_schemas(Path(args.directory))
    for path in written:
        print(path)
    return 0


def _bench(args: argparse.Namespace) -> int:
    figures: Mapping[str, object] = args.run_suite(args)
    for name, value in figures.items():
        print(f"{name}: {value}")
    return 0


def _bench_governance(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server import bench

    return bench.bench_governance(interactions=args.interactions)


def _bench_audit(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server import bench

    return bench.bench_audit(interactions=args.interactions)


def _bench_roundtrip(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench_sidecar import bench_roundtrip

    return bench_roundtrip(round_trips=args.round_trips)


def _bench_load(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench_sidecar import bench_load

    return bench_load(clients=args.clients, per_client=args.per_client)


def _bench_model(args: argparse.Namespace) -> str | None:
    """The benchmarked model as a file path: `--model` may name a catalogue model or hf:REPO/FILE."""
    if args.model is None:
        return None
    from loreguard.server.models.resolve import choose_model

    return str(choose_model(args.model, assume_yes=args.yes).path)


def _bench_inference(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench_inference import bench_inference

    return bench_inference(
        npcs=args.npcs, rounds=args.rounds, model=_bench_model(args), threads=args.threads, gpu_layers=args.gpu_layers,
        reproducible=args.reproducible,
    )  # fmt: skip


def _bench_quality(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench_quality import bench_quality

    runs = ("before", "after") if args.run == "both" else (args.run,)
    return bench_quality(lines=args.lines, runs=runs, model=args.model, threads=args.threads, gpu_layers=args.gpu_layers)


def _bench_streaming(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench_streaming import bench_streaming

    return bench_streaming(
        npcs=args.npcs, rounds=args.rounds, facts=args.facts, model=args.model, threads=args.threads, gpu_layers=args.gpu_layers,
        reproducible=args.reproducible,
    )  # fmt: skip


def _bench_concurrency(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench_concurrency import bench_concurrency

    return bench_concurrency(
        npcs=tuple(int(n) for n in args.npcs.split(",")),
        serial=args.serial,
        facts=args.facts,
        model=_bench_model(args),
        threads=args.threads,
        gpu_layers=args.gpu_layers,
        kv_budget_mib=args.kv_budget_mib,
    )


def _schemas_docs(args: argparse.Namespace) -> int:
    from loreguard.schemas.export import protocol_reference

    path = Path(args.file)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(protocol_reference(), encoding="utf-8")
    print(path)
    return 0


def _backend_factory(args: argparse.Namespace):  # noqa: ANN202
    """What to load, and a function that loads it."""
    if getattr(args, "backend", "llama") == "scripted":
        import json

        from loreguard.server.pipeline.inference import ScriptedBackend

        if not args.script:
            raise SystemExit("--backend scripted needs --script FILE (a JSON list of model outputs)")
        outputs = json.loads(Path(args.script).read_text())
        latency_s = getattr(args, "script_latency_ms", 0) / 1000
        return f"scripted outputs from {args.script}", lambda: ScriptedBackend(outputs, cycle=True, latency_s=latency_s)
    if getattr(args, "backend", "llama") == "openai":
        from loreguard.server.pipeline.inference.openai_backend import OpenAICompatibleBackend, OpenAICompatibleConfig

        config = OpenAICompatibleConfig(base_url=args.base_url)
        return f"remote model at {args.base_url}", lambda: OpenAICompatibleBackend(config)
    from loreguard.server.models.resolve import choose_model, warn_guesses
    from loreguard.server.pipeline.inference.llama_backend import LlamaCppBackend, LlamaCppConfig

    # A path, a catalogue name or hf:REPO/FILE; checked (and pulled, with consent) before loading.
    # A launching game tails --log-file and shows the download's progress: a line per percent. It
    # shows no question either, so then only --yes downloads (never a prompt on an inherited terminal).
    for_game = bool(getattr(args, "log_file", None))
    choice = choose_model(
        args.model, assume_yes=getattr(args, "yes", False), memory_budget_mib=getattr(args, "memory_budget_mib", None),
        kv_budget_mib=getattr(args, "kv_budget_mib", None), progress_step_pct=1 if for_game else 10,
        stdin=io.StringIO() if for_game else None,
    )  # fmt: skip
    warn_guesses(choice, sys.stderr)
    llama_config = LlamaCppConfig(
        model_path=str(choice.path),
        n_gpu_layers=args.gpu_layers,
        reproducible=getattr(args, "reproducible", False),
        parallel=getattr(args, "parallel", None),
        kv_budget_mib=getattr(args, "kv_budget_mib", None),
        **choice.settings,  # the catalogue's per-model settings
    )
    what = choice.entry.name if choice.entry else choice.path.name
    return what, lambda: LlamaCppBackend(llama_config)


def _demo(args: argparse.Namespace) -> int:
    from loreguard.server.demo.run import run_demo
    from loreguard.server.sidecar.serve import load_with_progress

    backend = None
    if not args.scripted:
        what, load = _backend_factory(args)
        backend = load_with_progress(what, load, sys.stderr)
    try:
        return run_demo(Path(args.data) if args.data else None, backend=backend, interactive=args.interactive)
    finally:
        if backend is not None:
            backend.close()


def _serve(args: argparse.Namespace) -> int:
    from loreguard.server.sidecar.serve import serve
    from loreguard.server.sidecar.transport import SidecarConfig

    if args.log_file:  # first, so a bad argument's message reaches the launching game too
        _redirect_output(Path(args.log_file))
    what, load = _with_lifeline(args.parent_pid, lambda: _backend_factory(args))
    config = SidecarConfig(
        host=args.host,
        port=args.port,
        max_message_bytes=args.max_message_bytes,
        queue_size=args.queue_size,
        request_timeout_ms=args.timeout_ms,
        launch_token=args.launch_token,
    )
    return serve(load, what, Path(args.data), config, judge=_judge_setup(args), parent_pid=args.parent_pid)


def _with_lifeline(parent_pid: int | None, step: Callable[[], _T]) -> _T:
    """Run `step` (which may download a model for minutes) and exit at once if the launching game
    dies meanwhile: `serve` watches the game itself only from when it starts loading."""
    if parent_pid is None:
        return step()
    import os

    from loreguard.server.sidecar.lifeline import ParentWatch, is_alive

    if not is_alive(parent_pid):
        print(f"the launching process {parent_pid} is not running; not starting", file=sys.stderr, flush=True)
        raise SystemExit(1)
    watch = ParentWatch(parent_pid, lambda: os._exit(0)).start()
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


def _judge_setup(args: argparse.Namespace):  # noqa: ANN202
    from loreguard.server.sidecar.serve import JudgeSetup

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
        from loreguard.server.pipeline.inference.openai_backend import OpenAICompatibleBackend, OpenAICompatibleConfig

        remote = OpenAICompatibleConfig(base_url=args.judge_url, timeout_s=args.judge_timeout_ms / 1000)
        return JudgeSetup(mode="model", timeout_ms=args.judge_timeout_ms, factory=lambda: OpenAICompatibleBackend(remote),
                          what=f"remote judge at {args.judge_url}")  # fmt: skip
    from loreguard.server.models.resolve import choose_model, warn_guesses
    from loreguard.server.pipeline.inference.llama_backend import LlamaCppBackend, LlamaCppConfig

    judge = choose_model(args.judge_model, assume_yes=args.yes, memory_budget_mib=args.memory_budget_mib)
    warn_guesses(judge, sys.stderr)
    local = LlamaCppConfig(model_path=str(judge.path), n_gpu_layers=args.gpu_layers, parallel=2, **judge.settings)
    what = judge.entry.name if judge.entry else judge.path.name
    return JudgeSetup(mode="model", timeout_ms=args.judge_timeout_ms, factory=lambda: LlamaCppBackend(local), what=what)


def _selection(args: argparse.Namespace):  # noqa: ANN202
    from loreguard.schemas.audit import PackageSelection

    return PackageSelection(npc_id=args.npc, last=args.last, first_seq=args.first, last_seq=args.to)


def _audit_export(args: argparse.Namespace) -> int:
    from loreguard.server.audit.commands import export_package
    from loreguard.server.audit.package import PackageFormat

    form = PackageFormat(args.format) if args.format else None
    return export_package(Path(args.data), Path(args.out), _selection(args), form)


def _audit_list(args: argparse.Namespace) -> int:
    from loreguard.server.audit.commands import list_records

    return list_records(Path(args.data), _selection(args))


def _replay(args: argparse.Namespace) -> int:
    from loreguard.server.audit.commands import replay_package
    from loreguard.server.sidecar.serve import load_with_progress

    backend = None
    if args.live:
        args.reproducible = True  # a recorded seed replays the same text only without batch effects
        what, load = _backend_factory(args)
        backend = load_with_progress(what, load, sys.stderr)
    try:
        return replay_package(
            Path(args.file),
            live_backend=backend,
            step=args.step,
            stop_on_drift=args.stop_on_drift,
            profile_files=[Path(p) for p in args.profile],
            world_file=Path(args.world) if args.world else None,
        )
    finally:
        if backend is not None:
            backend.close()


def _attach(args: argparse.Namespace) -> int:
    from loreguard.server.audit.commands import attach

    return attach(args.address, npc_id=args.npc, count=args.count, backlog=args.backlog)


def _add_selection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default="loreguard-data", help="the data folder `serve --data` or `demo --data` used")
    parser.add_argument("--npc", help="only this NPC's records")
    parser.add_argument("--last", type=int, help="only the newest N records")
    parser.add_argument("--from", dest="first", type=int, help="first log position (record rN)")
    parser.add_argument("--to", type=int, help="last log position")


def _add_model_options(parser: argparse.ArgumentParser, *, engine: bool = False) -> None:
    parser.add_argument(
        "--model", help="a GGUF file, a catalogue name (`loreguard models list`) or hf:REPO/FILE "
        "(default: the embedded SmolLM2-135M-Instruct)",
    )  # fmt: skip
    parser.add_argument("--yes", action="store_true", help="download a --model that is not installed without asking")
    parser.add_argument(
        "--memory-budget-mib", type=int, help="refuse a model that needs more memory than this (default: this machine's RAM)"
    )
    parser.add_argument("--gpu-layers", type=int, default=0, help="layers to offload to the GPU (-1: all; CUDA builds)")
    if engine:
        parser.add_argument(
            "--parallel", type=int, help="NPCs whose generations are decoded together (default: 8 with a GPU, 1 on the CPU)"
        )
        parser.add_argument(
            "--kv-budget-mib", type=int, help="KV cache memory for all sequences (default 2048 with a GPU, 512 on the CPU)"
        )
        parser.add_argument(
            "--reproducible", action="store_true",
            help="one generation at a time, numerics independent of other NPCs (tests, replays)",
        )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    from loreguard.server.shipping.commands import add_bundle_bench, add_bundle_commands

    parser = argparse.ArgumentParser(prog="loreguard", description="Governed LLM dialogue for game NPCs.")
    commands = parser.add_subparsers(dest="command", required=True)

    schemas = commands.add_parser("schemas", help="JSON Schema of the wire protocol")
    schemas_commands = schemas.add_subparsers(dest="schemas_command", required=True)
    export = schemas_commands.add_parser("export", help="write JSON Schema for every wire message")
    export.add_argument("directory", help="output folder, e.g. schemas/json")
    export.set_defaults(handler=_schemas_export)
    docs = schemas_commands.add_parser("docs", help="write the Markdown reference of every message body")
    docs.add_argument("file", help="output file, e.g. docs/protocol-messages.md")
    docs.set_defaults(handler=_schemas_docs)

    demo = commands.add_parser("demo", help="run the demo conversation through the governance pipeline")
    demo.add_argument("--data", help="keep memory in this folder (default: a temporary one)")
    _add_model_options(demo, engine=True)
    demo.add_argument("--scripted", action="store_true", help="replay recorded model outputs instead of running the model")
    demo.add_argument("--interactive", metavar="NPC", help="after the scripted turns, chat with this NPC (guard, merchant)")

    serve = commands.add_parser("serve", help="run the sidecar: protocol v1 on a ZeroMQ ROUTER socket")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    serve.add_argument("--port", type=int, default=7878)
    serve.add_argument("--data", default="loreguard-data", help="folder for memory (SQLite) and audit records")
    serve.add_argument(
        "--backend", choices=["llama", "openai", "scripted"], default="llama",
        help="in-process llama.cpp (default), an OpenAI-compatible HTTP server, or recorded outputs replayed in a loop",
    )  # fmt: skip
    serve.add_argument("--script", help="scripted backend: a JSON file with a list of model outputs")
    serve.add_argument(
        "--script-latency-ms", type=int, default=0, help="scripted backend: each line takes this long, like a model's"
    )
    serve.add_argument("--base-url", default="http://127.0.0.1:8080", help="openai backend: the server's URL")
    _add_model_options(serve, engine=True)
    serve.add_argument("--queue-size", type=int, default=64, help="queued interactions before `overloaded`")
    serve.add_argument("--max-message-bytes", type=int, default=1 << 20)
    serve.add_argument("--timeout-ms", type=int, default=60_000, help="deadline of one interaction")
    serve.add_argument(
        "--judge", choices=["off", "keyword", "model"], default="off",
        help="the semantic judge gate: off, its keyword check only, or a model first (keyword check as the fallback)",
    )  # fmt: skip
    serve.add_argument(
        "--judge-model", help="--judge model: a GGUF, catalogue name or hf:REPO/FILE for the judge (default: the dialogue model)"
    )
    serve.add_argument("--judge-url", help="--judge model: an OpenAI-compatible server for the judge instead")
    serve.add_argument("--judge-timeout-ms", type=int, default=3000, help="how long the judge model may take (default 3000)")
    serve.add_argument("--parent-pid", type=int, help="exit when this process (the game that launched the sidecar) dies")
    serve.add_argument("--launch-token", help="echoed in `hello`, so the launcher knows this sidecar is the one it started")
    serve.add_argument("--log-file", help="append all output here instead of the terminal (a launching game tails it)")
    serve.set_defaults(handler=_serve)
    demo.set_defaults(handler=_demo)

    audit = commands.add_parser("audit", help="the audit log: list records, export debug packages")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    audit_export = audit_commands.add_parser("export", help="write a debug package of recorded interactions")
    _add_selection_options(audit_export)
    audit_export.add_argument("--out", required=True, help="package file: *.json for JSON, anything else compressed")
    audit_export.add_argument("--format", choices=["json", "compressed"], help="override the form the file name picks")
    audit_export.set_defaults(handler=_audit_export)
    audit_list = audit_commands.add_parser("list", help="one line per recorded interaction")
    _add_selection_options(audit_list)
    audit_list.set_defaults(handler=_audit_list)

    replay = commands.add_parser("replay", help="replay a debug package and report drift (exit 1 on drift)")
    replay.add_argument("file", help="a debug package (JSON or compressed)")
    replay.add_argument("--live", action="store_true", help="run the current model with the recorded seeds (output drift)")
    replay.add_argument("--step", action="store_true", help="one record at a time, with its prompt diff and gate table")
    replay.add_argument("--stop-on-drift", action="store_true", help="stop at the first record that drifted")
    replay.add_argument("--profile", action="append", default=[], help="replace an NPC profile with this JSON file")
    replay.add_argument("--world", help="replace the world definition with this JSON file")
    _add_model_options(replay)
    replay.set_defaults(handler=_replay, backend="llama")

    attach = commands.add_parser("attach", help="follow a running sidecar's interactions live")
    attach.add_argument("--address", default="tcp://127.0.0.1:7878")
    attach.add_argument("--npc", help="only this NPC")
    attach.add_argument("--count", type=int, help="exit after N records (default: until Ctrl-C)")
    attach.add_argument("--backlog", type=int, default=10, help="recent records to show first")
    attach.set_defaults(handler=_attach)

    bench = commands.add_parser("bench", help="benchmarks; print `name: value` lines")
    suites = bench.add_subparsers(dest="suite", required=True, metavar="SUITE")
    for name, run_suite, about in (
        ("governance", _bench_governance, "full interactions with the scripted model"),
        ("audit", _bench_audit, "the same with and without the audit recorder"),
        ("roundtrip", _bench_roundtrip, "hello round trips through the sidecar vs a raw pyzmq echo"),
        ("load", _bench_load, "asyncio clients through the sidecar (scripted model)"),
        ("inference", _bench_inference, "the embedded model, NPCs with long prefixes, interleaved"),
        ("concurrency", _bench_concurrency, "N NPCs at once through the sidecar vs serial and llama.cpp's batched ceiling"),
        ("quality", _bench_quality, "the embedded model's answers to fixed player lines: pass, fallback, degenerate, parroted"),
        ("streaming", _bench_streaming, "streamed vs whole replies on the same interactions (embedded model)"),
    ):
        suite = suites.add_parser(name, help=about)
        suite.set_defaults(handler=_bench, run_suite=run_suite)
        if name in ("governance", "audit"):
            suite.add_argument("--interactions", type=int, default=400, help="interactions to time")
        elif name == "roundtrip":
            suite.add_argument("--round-trips", type=int, default=5000, help="hello round trips to time")
        elif name == "load":
            suite.add_argument("--clients", type=int, default=32, help="concurrent clients (one NPC each)")
            suite.add_argument("--per-client", type=int, default=50, help="interactions per client")
        elif name == "inference":
            suite.add_argument("--npcs", type=int, default=8, help="NPCs in the rotation")
            suite.add_argument("--rounds", type=int, default=3, help="turns per NPC")
            suite.add_argument("--reproducible", action="store_true", help="the one-at-a-time engine instead of the batched one")
        elif name == "quality":
            suite.add_argument("--lines", type=int, default=54, help="player lines of the fixed set to run (at most 54)")
            suite.add_argument("--run", choices=("both", "before", "after"), default="both", help="which setting to run")
        elif name == "streaming":
            suite.add_argument("--npcs", type=int, default=8, help="NPCs in the rotation")
            suite.add_argument("--rounds", type=int, default=2, help="turns per NPC")
            suite.add_argument("--facts", type=int, default=8, help="canonical facts per NPC (prefix length)")
            suite.add_argument("--reproducible", action="store_true", help="the one-at-a-time engine instead of the batched one")
        else:
            suite.add_argument("--npcs", default="1,8,32", help="comma-separated N: NPCs asking at once")
            suite.add_argument("--serial", type=int, default=8, help="NPCs in the one-at-a-time baseline")
            suite.add_argument("--facts", type=int, default=8, help="canonical facts per NPC (prefix length)")
            suite.add_argument("--kv-budget-mib", type=int, help="KV cache memory (default: the engine's)")
        if name in ("inference", "concurrency", "quality", "streaming"):
            suite.add_argument("--model", help="a GGUF file, catalogue name or hf:REPO/FILE (default: the embedded model)")
            suite.add_argument("--yes", action="store_true", help="download a --model that is not installed without asking")
            suite.add_argument("--threads", type=int, help="CPU threads (default: cores - 1)")
            suite.add_argument("--gpu-layers", type=int, default=0, help="layers to offload to the GPU (-1: all)")
    add_bundle_bench(suites, _bench)
    add_bundle_commands(commands)
    _add_models_command(commands)
    return parser


def _models_list(args: argparse.Namespace) -> int:
    from loreguard.server.models.commands import list_catalogue, list_installed

    return list_installed() if args.installed else list_catalogue()


def _models_pull(args: argparse.Namespace) -> int:
    from loreguard.server.models.commands import pull_model

    return pull_model(args.name)


def _add_models_command(commands: argparse._SubParsersAction) -> None:
    models = commands.add_parser("models", help="the curated model catalogue; downloads from the Hugging Face Hub")
    models_commands = models.add_subparsers(dest="models_command", required=True)
    models_list = models_commands.add_parser("list", help="the catalogue, or with --installed what is on disk")
    models_list.add_argument("--installed", action="store_true", help="models in the Hub cache (HF_HOME) and the embedded one")
    models_list.set_defaults(handler=_models_list)
    models_pull = models_commands.add_parser("pull", help="download and verify a model; print its path")
    models_pull.add_argument("name", help="a catalogue name or hf:REPO/FILE")
    models_pull.set_defaults(handler=_models_pull)


def main(argv: Sequence[str] | None = None) -> int:
    from loreguard.server.audit.commands import CommandError
    from loreguard.server.models.pull import ModelError

    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (CommandError, ModelError) as exc:
        print(f"loreguard: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
