"""The shipping subcommands: `loreguard bundle` (freeze the sidecar), `loreguard addon-zip` (the
addon in the Asset Library layout), `loreguard warm` (NPCs' prompts evaluated for shipping) and the
suite `loreguard bench bundle` (size and cold start)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def _bundle(args: argparse.Namespace) -> int:
    from loreguard.server.shipping.build_bundle import BundleError, build_bundle

    model = Path(args.model) if args.model else None
    if args.with_embedded_model:
        from loreguard.server.inference.model_files import ModelNotFound, embedded_model_path

        try:
            model = embedded_model_path()
        except ModelNotFound as exc:
            print(f"loreguard bundle: {exc}", file=sys.stderr)
            return 2
    try:
        prompts = Path(args.prompts) if args.prompts else None
        if prompts is not None and (model is None or not prompts.is_dir()):
            raise BundleError(f"--prompts {prompts}: needs a model to ship beside, and a folder from `loreguard warm`")
        built = build_bundle(Path(args.out), model, accelerator=args.accelerator, prompts=prompts)
    except BundleError as exc:
        print(f"loreguard bundle: {exc}", file=sys.stderr)
        return 2
    print(f"bundle: {built.folder}")
    print(f"executable: {built.executable}")
    print(f"model: {model.name if model else 'none (pass --model to serve)'}")
    print(f"accelerator: {built.accelerator}")
    print(f"build_s: {built.seconds:.1f}")
    print(f"bundle_size_mib: {built.size_bytes / 2**20:.1f}")
    return 0


def _bench_bundle(args: argparse.Namespace) -> dict[str, object]:
    from loreguard.server.shipping.bench_bundle import BenchError, run

    try:
        return run(Path(args.bundle), Path(args.model) if args.model else None, args.runs)
    except BenchError as exc:
        raise SystemExit(f"loreguard bench bundle: {exc}") from None


def _addon_zip(args: argparse.Namespace) -> int:
    from loreguard.server.shipping.addon_zip import AddonZipError, write_addon_zip

    try:
        written = write_addon_zip(Path(args.addon), Path(args.license), Path(args.out))
    except AddonZipError as exc:
        print(f"loreguard addon-zip: {exc}", file=sys.stderr)
        return 2
    print(f"addon_zip: {written.path}")
    print(f"addon_zip_kib: {written.size_bytes / 1024:.1f}")
    print(f"addon_zip_files: {written.files}")
    return 0


def _warm(args: argparse.Namespace) -> int:
    from loreguard.server.demo import demo_npcs, demo_world
    from loreguard.server.inference.llama_backend import LlamaCppBackend
    from loreguard.server.inference.llama_config import LlamaCppConfig
    from loreguard.server.models.resolve import choose_model
    from loreguard.server.shipping.warm_prompts import WarmError, read_npcs, read_world, shipped_folder, warm_prompts

    try:
        world = read_world(Path(args.world)) if args.world else demo_world()
        npcs = read_npcs(Path(args.npcs)) if args.npcs else list(demo_npcs())
    except WarmError as exc:
        print(f"loreguard warm: {exc}", file=sys.stderr)
        return 2
    resolved = choose_model(None if args.model == "embedded" else args.model, assume_yes=args.yes)
    out = Path(args.out) if args.out else shipped_folder(resolved.path)

    def load(folder: Path) -> LlamaCppBackend:
        settings = {**resolved.settings, "reproducible": True, "prompt_cache_dir": str(folder)}
        return LlamaCppBackend(LlamaCppConfig(model_path=str(resolved.path), n_threads=args.threads, **settings))

    try:
        warmed = warm_prompts(world, npcs, load, out)
    except WarmError as exc:
        print(f"loreguard warm: {exc}", file=sys.stderr)
        return 2
    for npc in warmed:
        print(f"{npc.npc_id}: {npc.tokens} tokens, {npc.size_bytes / 2**20:.1f} MiB, {npc.seconds:.1f} s")
    print(f"prompts: {out}")
    print(f"model: {resolved.path.name}")
    return 0


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `bundle`, `addon-zip` and `warm` to `loreguard`'s subcommands."""
    bundle = commands.add_parser("bundle", help="freeze a standalone sidecar folder for this platform (PyInstaller)")
    bundle.add_argument(
        "--out", default="dist/loreguard-sidecar", help="the bundle folder (replaced; default dist/loreguard-sidecar)"
    )
    bundle.add_argument(
        "--accelerator", choices=("auto", "cpu", "vulkan", "cuda", "metal"), default="auto",
        help="the llama.cpp build to ship; must be this environment's (default auto: whichever it is)",
    )  # fmt: skip
    which = bundle.add_mutually_exclusive_group()
    which.add_argument("--model", help="copy this GGUF file into the bundle as its default model")
    which.add_argument("--with-embedded-model", action="store_true", help="copy the embedded SmolLM2 model into the bundle")
    bundle.add_argument(
        "--prompts", help="NPC prompts from `loreguard warm` to ship beside the model (default: MODEL.prompts when it exists)"
    )
    bundle.set_defaults(handler=_bundle)

    addon = commands.add_parser("addon-zip", help="zip the Godot addon in the Asset Library layout")
    addon.add_argument("--addon", default="godot_addon/addons/loreguard", help="the addon folder")
    addon.add_argument("--license", default="LICENSE", help="the license file to include")
    addon.add_argument("--out", default="dist/loreguard-addon.zip")
    addon.set_defaults(handler=_addon_zip)

    warm = commands.add_parser(
        "warm", help="evaluate NPCs' prompts for shipping: a player's first launch restores them instead (docs/shipping.md)"
    )
    warm.add_argument("--world", help="the world definition, JSON (default: the demo's)")
    warm.add_argument("--npcs", help="a folder of NPC profiles, one JSON file each (default: the demo's)")
    warm.add_argument("--model", default="embedded", help="a GGUF file or catalogue name (default: embedded)")
    warm.add_argument("--yes", action="store_true", help="download a --model that is not installed without asking")
    warm.add_argument("--threads", type=int, help="CPU threads (default: one fewer than the cores)")
    warm.add_argument(
        "--out", help="the folder to write (default: MODEL.prompts beside the model file, which serve reads by itself)"
    )
    warm.set_defaults(handler=_warm)


def add_bundle_bench(suites: Any, bench_handler: Any) -> None:
    """`suites`: the `bench` subparsers action; `bench_handler` prints the figures."""
    suite = suites.add_parser("bundle", help="a bundle's size and cold start to ready, against `loreguard serve` from this venv")
    suite.add_argument("--bundle", default="dist/loreguard-sidecar", help="the bundle folder")
    suite.add_argument("--model", help="a GGUF for both sidecars (default: the bundle's model)")
    suite.add_argument("--runs", type=int, default=3, help="cold starts of each (the median is reported)")
    suite.set_defaults(handler=bench_handler, run_suite=_bench_bundle)
