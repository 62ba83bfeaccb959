"""`loreguard bench SUITE`: each suite's options, and the `name: value` lines it prints."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import TypedDict

#: A suite runs from the parsed options and returns its figures.
Suite = Callable[[argparse.Namespace], Mapping[str, object]]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `bench` and its suites to `loreguard`'s subcommands."""
    from loreguard.server.shipping.cli import add_bundle_bench

    bench = commands.add_parser("bench", help="benchmarks; print `name: value` lines")
    suites = bench.add_subparsers(dest="suite", required=True, metavar="SUITE")
    _scripted_suites(suites)
    _model_suites(suites)
    add_bundle_bench(suites, print_figures)


def _scripted_suites(suites: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The suites on the scripted model: the governance plane, the sidecar, a long game."""
    _interactions(_suite(suites, "governance", _governance, "full interactions with the scripted model"))
    _interactions(_suite(suites, "audit", _audit, "the same with and without the audit recorder"))
    scene = _suite(suites, "scene", _scene, "scene lines against one-NPC interactions; the gap between lines, prefilled or not")
    scene.add_argument("--scenes", type=int, default=3, help="scenes of three NPCs each")
    scene.add_argument("--lines", type=int, default=6, help="lines per scene")
    scene.add_argument("--facts", type=int, default=8, help="canonical facts per NPC (prompt length)")
    scene.add_argument("--pause-s", type=float, default=1.0, help="seconds the player reads a line before the next is asked")
    _model_options(scene)
    soak = _suite(suites, "soak", _soak, "a long game with the scripted model: latency, size, RSS per window; replay; recall")
    soak.add_argument("--interactions", type=int, default=20_000, help="interactions in the game")
    soak.add_argument("--npcs", type=int, default=50, help="NPCs the player talks to (Zipf: a few get most lines)")
    soak.add_argument("--window", type=int, default=1_000, help="interactions per reported window")
    soak.add_argument("--planted", type=int, default=60, help="memories told early and asked about at the end")
    soak.add_argument("--audit-keep", type=int, default=50, help="audit records kept per NPC (0: keep all)")
    soak.add_argument(
        "--episodic-limit", type=int, default=128,
        help="long-term memory entries per NPC (MemoryPolicy.episodic_limit; small enough that every NPC reaches it)",
    )  # fmt: skip
    roundtrip = _suite(suites, "roundtrip", _roundtrip, "hello round trips through the sidecar vs a raw pyzmq echo")
    roundtrip.add_argument("--round-trips", type=int, default=5000, help="hello round trips to time")
    load = _suite(suites, "load", _load, "asyncio clients through the sidecar (scripted model)")
    load.add_argument("--clients", type=int, default=32, help="concurrent clients (one NPC each)")
    load.add_argument("--per-client", type=int, default=50, help="interactions per client")


def _model_suites(suites: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The suites on a real model (the embedded one unless --model says otherwise)."""
    inference = _suite(suites, "inference", _inference, "the embedded model, NPCs with long prefixes, interleaved")
    inference.add_argument("--npcs", type=int, default=8, help="NPCs in the rotation")
    inference.add_argument("--rounds", type=int, default=3, help="turns per NPC")
    _reproducible(inference)
    concurrency = _suite(
        suites, "concurrency", _concurrency, "N NPCs at once through the sidecar vs serial and llama.cpp's batched ceiling"
    )
    concurrency.add_argument("--npcs", default="1,8,32", help="comma-separated N: NPCs asking at once")
    concurrency.add_argument("--serial", type=int, default=8, help="NPCs in the one-at-a-time baseline")
    concurrency.add_argument("--facts", type=int, default=8, help="canonical facts per NPC (prefix length)")
    concurrency.add_argument("--kv-budget-mib", type=int, help="KV cache memory (default: the engine's)")
    concurrency.add_argument(
        "--backend", choices=("llama", "openai"), default="llama", help="the in-process engine, or a model server at --base-url"
    )
    concurrency.add_argument("--base-url", help="--backend openai: the server (--model then names its model)")
    stand_in = suites.add_parser(
        "stand-in-engine", help="serve a stand-in model server with N slots and a fixed cost per token (for concurrency figures)"
    )
    stand_in.add_argument("--port", type=int, default=8090)
    stand_in.add_argument("--slots", type=int, default=8, help="generations at once; the rest wait for a slot")
    stand_in.add_argument("--token-ms", type=float, default=20.0, help="milliseconds per generated token")
    stand_in.add_argument("--prompt-token-ms", type=float, default=0.0, help="milliseconds per prompt token not cached")
    stand_in.set_defaults(handler=_stand_in_engine)
    sampling = _suite(suites, "sampling", _sampling, "host time per sampled token (grammar masks, sampling) at 1, 8, 32 rows")
    sampling.add_argument("--rows", default="1,8,32", help="comma-separated N: generations decoding together")
    quality = _suite(
        suites, "quality", _quality, "the embedded model's answers to fixed player lines: pass, fallback, degenerate, parroted"
    )
    quality.add_argument("--lines", type=int, default=None, help="player lines of the fixed set to run (default: all)")
    quality.add_argument("--run", choices=("both", "before", "after"), default="both", help="which setting to run")
    quality.add_argument(
        "--judge", action="store_true", help="the after run with the semantic judge in each NPC's own sequence, and its cost"
    )
    streaming = _suite(suites, "streaming", _streaming, "streamed vs whole replies on the same interactions (embedded model)")
    streaming.add_argument("--npcs", type=int, default=8, help="NPCs in the rotation")
    streaming.add_argument("--rounds", type=int, default=2, help="turns per NPC")
    streaming.add_argument("--facts", type=int, default=8, help="canonical facts per NPC (prefix length)")
    _reproducible(streaming)
    first_line = _suite(
        suites, "first-line", _first_line, "launching the sidecar to the player's first words, NPCs warmed or not"
    )
    first_line.add_argument("--launches", type=int, default=3, help="launches of each mode (cold, warm, warmed, relaunch)")
    first_line.add_argument("--typing-s", type=float, default=2.0, help="seconds the player takes to type the first line")
    first_line.add_argument(
        "--busy", action="store_true", help="also launch on a busy machine (a process spinning on each core), alternated"
    )
    town = _suite(suites, "town", _town, "a town of NPCs warmed at launch: evaluated (first launch) and restored from disk")
    town.add_argument("--npcs", type=int, default=20, help="NPCs in the town")
    town.add_argument("--rounds", type=int, default=2, help="pairs of launches (cold, then restored)")
    town.add_argument("--kv-budget-mib", type=int, default=1024, help="KV cache memory (every NPC's prompt stays resident)")
    fast_forward = _suite(
        suites, "fast-forward", _fast_forward, "the grammar's forced tokens in one step vs one step each, same requests"
    )
    fast_forward.add_argument("--lines", type=int, default=None, help="player lines of bench quality's set (default: all)")
    for parser in (inference, concurrency, sampling, quality, streaming, first_line, town, fast_forward):
        _model_options(parser)


def print_figures(args: argparse.Namespace) -> int:
    """The handler of every suite: run it, print its figures as `name: value` lines."""
    figures: Mapping[str, object] = args.run_suite(args)
    for name, value in figures.items():
        print(f"{name}: {value}")
    return 0


def _suite(
    suites: argparse._SubParsersAction[argparse.ArgumentParser], name: str, run: Suite, about: str
) -> argparse.ArgumentParser:
    suite = suites.add_parser(name, help=about)
    suite.set_defaults(handler=print_figures, run_suite=run)
    return suite


def _interactions(suite: argparse.ArgumentParser) -> None:
    suite.add_argument("--interactions", type=int, default=400, help="interactions to time")


def _reproducible(suite: argparse.ArgumentParser) -> None:
    suite.add_argument("--reproducible", action="store_true", help="the one-at-a-time engine instead of the batched one")


def _model_options(suite: argparse.ArgumentParser) -> None:
    from loreguard.server.models.cli import add_device_options

    suite.add_argument("--model", help="a GGUF file, catalogue name or hf:REPO/FILE (default: the embedded model)")
    suite.add_argument("--yes", action="store_true", help="download a --model that is not installed without asking")
    suite.add_argument("--threads", type=int, help="CPU threads (default: cores - 1)")
    add_device_options(suite)


class _Placement(TypedDict):
    gpu_layers: int
    device: str


def _placement(args: argparse.Namespace) -> _Placement:
    """`--device` and `--gpu-layers` as the bench functions take them (DeviceError: exit 2)."""
    from loreguard.server.inference.devices import choose_device

    return {"gpu_layers": choose_device(args.device, args.gpu_layers).gpu_layers, "device": args.device}


def _model_path(args: argparse.Namespace) -> str | None:
    """The benchmarked model as a file path: `--model` may name a catalogue model or hf:REPO/FILE."""
    if args.model is None:
        return None
    from loreguard.server.models.resolve import choose_model

    return str(choose_model(args.model, assume_yes=args.yes).path)


def _governance(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench.governance import bench_governance

    return bench_governance(interactions=args.interactions)


def _audit(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench.governance import bench_audit

    return bench_audit(interactions=args.interactions)


def _soak(args: argparse.Namespace) -> Mapping[str, object]:
    import sys

    from loreguard.memory import MemoryPolicy
    from loreguard.server.bench.soak import bench_soak

    return bench_soak(
        npcs=args.npcs,
        interactions=args.interactions,
        window=args.window,
        planted=args.planted,
        keep_per_npc=args.audit_keep or None,
        policy=MemoryPolicy(episodic_limit=args.episodic_limit),
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )


def _scene(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench.scene import bench_scene

    return bench_scene(
        scenes=args.scenes, lines=args.lines, facts=args.facts, model=_model_path(args), threads=args.threads,
        **_placement(args), pause_s=args.pause_s,
    )  # fmt: skip


def _town(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench.town import bench_town

    return bench_town(
        npcs=args.npcs, rounds=args.rounds, model=_model_path(args), threads=args.threads, **_placement(args),
        kv_budget_mib=args.kv_budget_mib,
    )  # fmt: skip


def _roundtrip(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench.sidecar import bench_roundtrip

    return bench_roundtrip(round_trips=args.round_trips)


def _load(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench.sidecar import bench_load

    return bench_load(clients=args.clients, per_client=args.per_client)


def _inference(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench.inference import bench_inference

    return bench_inference(
        npcs=args.npcs, rounds=args.rounds, model=_model_path(args), threads=args.threads, **_placement(args),
        reproducible=args.reproducible,
    )  # fmt: skip


def _sampling(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench.sampling import bench_sampling

    return bench_sampling(
        rows=tuple(int(n) for n in args.rows.split(",")), model=_model_path(args), threads=args.threads, **_placement(args)
    )


def _quality(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench.quality import bench_quality
    from loreguard.server.models.resolve import choose_model

    runs = ("before", "after") if args.run == "both" else (args.run,)
    # the catalogue's settings too (sampler, stop tokens, context): a catalogue model as `serve` drives it
    chosen = choose_model(args.model, assume_yes=args.yes) if args.model is not None else None
    return bench_quality(
        lines=args.lines, runs=runs, model=str(chosen.path) if chosen else None,
        model_settings=dict(chosen.settings) if chosen else {}, threads=args.threads, **_placement(args), judge=args.judge,
    )  # fmt: skip


def _fast_forward(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench.fast_forward import bench_fast_forward
    from loreguard.server.models.resolve import choose_model

    chosen = choose_model(args.model, assume_yes=args.yes) if args.model is not None else None
    return bench_fast_forward(
        lines=args.lines, model=str(chosen.path) if chosen else None, model_settings=dict(chosen.settings) if chosen else {},
        threads=args.threads, **_placement(args),
    )  # fmt: skip


def _streaming(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench.streaming import bench_streaming

    return bench_streaming(
        npcs=args.npcs, rounds=args.rounds, facts=args.facts, model=args.model, threads=args.threads, **_placement(args),
        reproducible=args.reproducible,
    )  # fmt: skip


def _first_line(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench.first_line import bench_first_line

    serve_args = ["--model", args.model] if args.model else []
    serve_args += ["--yes"] if args.yes else []
    serve_args += ["--device", args.device] if args.device else []
    serve_args += ["--gpu-layers", str(args.gpu_layers)] if args.gpu_layers is not None else []
    return bench_first_line(launches=args.launches, typing_s=args.typing_s, extra_args=tuple(serve_args), busy=args.busy)


def _concurrency(args: argparse.Namespace) -> Mapping[str, object]:
    from loreguard.server.bench.concurrency import bench_concurrency

    return bench_concurrency(
        npcs=tuple(int(n) for n in args.npcs.split(",")),
        serial=args.serial,
        facts=args.facts,
        model=args.model if args.backend == "openai" else _model_path(args),
        threads=args.threads,
        **_placement(args),
        kv_budget_mib=args.kv_budget_mib,
        base_url=_remote(args),
    )


def _remote(args: argparse.Namespace) -> str | None:
    if args.backend == "openai" and not args.base_url:
        raise SystemExit("--backend openai needs --base-url URL (a model server, or `loreguard bench stand-in-engine`)")
    return args.base_url if args.backend == "openai" else None


def _stand_in_engine(args: argparse.Namespace) -> int:
    from loreguard.server.bench.stand_in_engine import StandInConfig, StandInEngine

    config = StandInConfig(slots=args.slots, token_ms=args.token_ms, prompt_token_ms=args.prompt_token_ms)
    engine = StandInEngine(config, port=args.port)
    print(f"stand-in engine on http://127.0.0.1:{args.port}: {args.slots} slots, {args.token_ms:g} ms a token", flush=True)
    try:
        engine.serve_forever()
    except KeyboardInterrupt:
        engine.stop()
    return 0
