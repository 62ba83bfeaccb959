"""`loreguard models list|pull`, `loreguard devices`, and the model options every command that loads a model shares."""

from __future__ import annotations

import argparse

from loreguard.server.models.backends import BackendChoice


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `models` to `loreguard`'s subcommands."""
    models = commands.add_parser(
        "models", help="the curated model catalogue; downloads from the Hugging Face Hub (or the package registry)"
    )
    models_commands = models.add_subparsers(dest="models_command", required=True)
    models_list = models_commands.add_parser("list", help="the catalogue, or with --installed what is on disk")
    models_list.add_argument(
        "--installed", action="store_true",
        help="models in the Hub cache (HF_HOME), those assembled from the package registry, and the embedded one",
    )  # fmt: skip
    models_list.set_defaults(handler=_list)
    models_pull = models_commands.add_parser("pull", help="download and verify a model; print its path")
    models_pull.add_argument("name", help="a catalogue name or hf:REPO/FILE")
    models_pull.set_defaults(handler=_pull)
    devices = commands.add_parser("devices", help="the devices this llama.cpp build can run a model on (for --device)")
    devices.set_defaults(handler=_devices)


def _devices(args: argparse.Namespace) -> int:
    from loreguard.server.inference.devices import available_devices, built_backends

    print(f"backends: cpu{''.join(', ' + b for b in built_backends())}")
    for device in available_devices():
        print(
            f"{device.spec}: {device.description} ({device.kind}, {device.memory_free_mib} of {device.memory_total_mib} MiB free)"
        )
    return 0


def _list(args: argparse.Namespace) -> int:
    from loreguard.server.models.commands import list_catalogue, list_installed

    return list_installed() if args.installed else list_catalogue()


def _pull(args: argparse.Namespace) -> int:
    from loreguard.server.models.commands import pull_model

    return pull_model(args.name)


def add_model_options(parser: argparse.ArgumentParser, *, engine: bool = False, default: str | None = None) -> None:
    """`--model` and what goes with it (`default`: the model when none is named; None: the
    embedded one); `engine`: the batched engine's options too."""
    parser.add_argument(
        "--model", default=default,
        help="a GGUF file, a catalogue name (`loreguard models list`), hf:REPO/FILE, `embedded` (SmolLM2-135M-Instruct, "
        "inside the package) or `auto` (the strongest model that answers within 8 s on this machine's CPU, 3 s on a GPU) "
        f"(default: {default or 'embedded'})",
    )  # fmt: skip
    parser.add_argument("--yes", action="store_true", help="download a --model that is not installed without asking")
    parser.add_argument(
        "--memory-budget-mib", type=int, help="refuse a model that needs more memory than this (default: this machine's RAM)"
    )
    add_device_options(parser)
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


def add_device_options(parser: argparse.ArgumentParser) -> None:
    """`--device` and `--gpu-layers` (devices.py decides what they mean together)."""
    parser.add_argument(
        "--device", default="auto",
        help="where the model runs: cpu, gpu (the first GPU, else the CPU), vulkan:0, cuda:0... "
        "(default auto: the first GPU when --gpu-layers is given, else the CPU; `loreguard devices` lists them)",
    )  # fmt: skip
    parser.add_argument(
        "--gpu-layers", type=int, help="layers to offload to the GPU (-1: all; default: all with --device GPU, else none)"
    )


def backend_choice(args: argparse.Namespace, *, reproducible: bool | None = None) -> BackendChoice:
    """The dialogue model the parsed options ask for (`add_model_options`, and `serve`'s
    `--backend` options where the command has them)."""
    return BackendChoice(
        kind=getattr(args, "backend", "llama"),
        model=args.model,
        assume_yes=args.yes,
        memory_budget_mib=args.memory_budget_mib,
        gpu_layers=args.gpu_layers,
        device=args.device,
        reproducible=getattr(args, "reproducible", False) if reproducible is None else reproducible,
        parallel=getattr(args, "parallel", None),
        kv_budget_mib=getattr(args, "kv_budget_mib", None),
        for_game=bool(getattr(args, "log_file", None)),
        base_url=getattr(args, "base_url", BackendChoice.base_url),
        chat_template=getattr(args, "chat_template", None),
        script=getattr(args, "script", None),
        script_latency_ms=getattr(args, "script_latency_ms", 0),
    )
