"""`loreguard` command line: one entry point, one subcommand per job."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _schemas_export(args: argparse.Namespace) -> int:
    from loreguard.schemas.export import export_json_schemas

    written = export_json_schemas(Path(args.directory))
    for path in written:
        print(path)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from loreguard.server import bench

    if args.suite == "governance":
        figures = bench.bench_governance(interactions=args.interactions)
    elif args.suite == "inference":
        from loreguard.server.bench_inference import bench_inference

        figures = bench_inference(npcs=args.npcs, rounds=args.rounds, model=args.model, threads=args.threads)
    else:  # argparse restricts the choices
        raise AssertionError(args.suite)
    for name, value in figures.items():
        print(f"{name}: {value}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from loreguard.server.demo.run import run_demo

    backend = None
    if not args.scripted:
        from loreguard.server.pipeline.inference.llama_backend import LlamaCppBackend, LlamaCppConfig

        backend = LlamaCppBackend(LlamaCppConfig(model_path=args.model, n_gpu_layers=args.gpu_layers))
    try:
        return run_demo(Path(args.data) if args.data else None, backend=backend)
    finally:
        if backend is not None:
            backend.close()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loreguard", description="Governed LLM dialogue for game NPCs.")
    commands = parser.add_subparsers(dest="command", required=True)

    schemas = commands.add_parser("schemas", help="JSON Schema of the wire protocol")
    schemas_commands = schemas.add_subparsers(dest="schemas_command", required=True)
    export = schemas_commands.add_parser("export", help="write JSON Schema for every wire message")
    export.add_argument("directory", help="output folder, e.g. schemas/json")
    export.set_defaults(handler=_schemas_export)

    demo = commands.add_parser("demo", help="run the demo conversation through the governance pipeline")
    demo.add_argument("--data", help="keep memory in this folder (default: a temporary one)")
    demo.add_argument("--model", help="a GGUF file (default: the embedded SmolLM2-135M-Instruct)")
    demo.add_argument("--gpu-layers", type=int, default=0, help="layers to offload to the GPU (-1: all; CUDA builds)")
    demo.add_argument("--scripted", action="store_true", help="replay recorded model outputs instead of running the model")
    demo.set_defaults(handler=_demo)

    bench = commands.add_parser("bench", help="benchmarks; print `name: value` lines")
    bench.add_argument("suite", choices=["governance", "inference"])
    bench.add_argument("--interactions", type=int, default=400, help="governance: interactions to time")
    bench.add_argument("--npcs", type=int, default=8, help="inference: NPCs in the rotation")
    bench.add_argument("--rounds", type=int, default=3, help="inference: turns per NPC")
    bench.add_argument("--model", help="inference: a GGUF file (default: the embedded model)")
    bench.add_argument("--threads", type=int, help="inference: CPU threads (default: cores - 1)")
    bench.set_defaults(handler=_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
