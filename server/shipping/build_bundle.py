"""`loreguard bundle`: a standalone sidecar folder for this platform, frozen with PyInstaller.

PyInstaller (rather than Nuitka or cx_Freeze): it is actively maintained, needs no C compiler
on the build machine, keeps a onedir build's native libraries as plain files beside the
executable (llama.cpp's and libzmq's), and its hooks already cover pyzmq, pydantic and jinja2.
llama-cpp-python has no hook, so its `lib/` folder is added here explicitly: the bindings load
`llama_cpp/lib/libllama.*` relative to their own module, which onedir preserves.

The result, `<out>/`:
    loreguard-sidecar[.exe]   the executable: `loreguard-sidecar serve --port N --data DIR`
    _internal/                Python, the project, llama.cpp, libzmq
    models/<file>.gguf        the model, when one was chosen (`--model`, `--with-embedded-model`)
    models/<file>.prompts/    its NPCs' prompts evaluated by `loreguard warm`, when there are any
    bundle.json               version, platform and model: what the addon checks before launching
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from loreguard.server.shipping.manifest import MANIFEST
from loreguard.server.shipping.platform_tag import arch_name, executable_name, os_name

EXECUTABLE = "loreguard-sidecar"
MANIFEST_FORMAT = 1
#: Package data the sidecar reads at run time: (package, folder inside it).
PACKAGE_DATA = (("loreguard.schemas", "json"), ("loreguard.server.demo", "data"))
#: Single data files, by package (pyproject's package-data).
PACKAGE_FILES = (("loreguard.server.models", "catalogue.json"), ("confusable_homoglyphs", "confusables.json"))
#: Packages the sidecar reaches only by name (importlib.resources in schemas/text.py), which
#: PyInstaller's import graph does not see: without them the gate fails on a non-ASCII reply.
HIDDEN_IMPORTS = ("confusable_homoglyphs",)
#: Installed in the build venv for other jobs (tests, the remote-backend server), never imported by the sidecar.
#: llama_cpp's `from_pretrained` (a model hub download) brings huggingface_hub, hf_xet and yaml; the sidecar
#: loads local files only. A bundle ships inside a game with its model: a player's machine does not
#: download from the Hub (tokens, gated licences, a cache in the player's home), and the Hub client
#: would add about 20 MB (huggingface_hub 7.6 MB, hf_xet 11 MB, yaml 3 MB). A Hub name in a bundle's
#: arguments is one line saying to pull with the pip-installed CLI (server/models/pull.py, require_hub).
EXCLUDED = (
    "tkinter", "llama_cpp.server", "fastapi", "uvicorn", "starlette", "sse_starlette", "pytest", "mypy", "IPython",
    "huggingface_hub", "hf_xet", "yaml",
)  # fmt: skip


class BundleError(Exception):
    """The bundle could not be built (missing PyInstaller, model file, or a failed freeze)."""


@dataclass(frozen=True)
class BuiltBundle:
    folder: Path
    executable: Path
    seconds: float
    size_bytes: int
    accelerator: str = "cpu"


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _package_folder(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise BundleError(f"cannot find the package {package}")
    return Path(spec.origin).parent


def pyinstaller_arguments(out: Path, work: Path) -> list[str]:
    """The PyInstaller command line (after `python -m PyInstaller`) for a onedir build."""
    llama_lib = _package_folder("llama_cpp") / "lib"
    # The project as a plain folder tree on PyInstaller's path: an editable install (`pip install
    # -e`, what ./dev and CI use) maps `loreguard.*` through an import hook that PyInstaller's
    # module graph does not follow, and the bundle would start without its own code.
    source = work / "src" / "loreguard"
    source.mkdir(parents=True, exist_ok=True)
    for part in PROJECT_PACKAGES:
        link = source / part
        if not link.exists():
            link.symlink_to(_package_folder(f"loreguard.{part}"), target_is_directory=True)
    args = [
        "--paths", str(work / "src"),
        "--noconfirm", "--onedir", "--console", "--log-level", "WARN",
        "--name", EXECUTABLE,
        "--distpath", str(out.parent), "--workpath", str(work / "build"), "--specpath", str(work),
        # `hello` reports the installed version; `version()` needs the distribution's metadata.
        "--copy-metadata", "loreguard", "--copy-metadata", "llama_cpp_python",
        # llama.cpp's shared libraries, where the bindings look for them (next to llama_cpp/).
        "--add-binary", f"{llama_lib}{_SEP}llama_cpp/lib",
    ]  # fmt: skip
    for package, folder in PACKAGE_DATA:
        source = _package_folder(package) / folder
        args += ["--add-data", f"{source}{_SEP}{package.replace('.', '/')}/{folder}"]
    for package, name in PACKAGE_FILES:
        args += ["--add-data", f"{_package_folder(package) / name}{_SEP}{package.replace('.', '/')}"]
    for module in HIDDEN_IMPORTS:
        args += ["--hidden-import", module]
    for module in EXCLUDED:
        args += ["--exclude-module", module]
    # The frozen entry point, by path: PyInstaller starts from the file, nothing imports it.
    args.append(str(Path(__file__).resolve().with_name("frozen_main.py")))
    return args


_SEP = ";" if sys.platform == "win32" else ":"
#: The project's top-level packages (pyproject's package-dir).
PROJECT_PACKAGES = ("schemas", "text", "memory", "server", "client")


#: What each accelerator's bundle needs on the player's machine, in bundle.json.
NEEDS = {
    "cpu": "",
    "vulkan": "the Vulkan loader (libvulkan.so.1 / vulkan-1.dll), which every GPU driver installs",
    "cuda": "an NVIDIA driver for the CUDA version the build used",
    "metal": "macOS with Metal",
}


#: Libraries PyInstaller collects as dependencies that must come from the player's system: the
#: Vulkan loader finds the installed GPU driver's ICD, and a loader older than the driver (the
#: build machine's) may not.
SYSTEM_LIBRARIES = ("libvulkan.so.1",)


def _use_the_systems_loaders(bundle: Path) -> None:
    for name in SYSTEM_LIBRARIES:
        for found in bundle.rglob(name):
            found.unlink()


def _link_duplicate_libraries(bundle: Path) -> None:
    """The wheel ships every shared library three times (`libx.so`, `libx.so.0`,
    `libx.so.0.1.2`, as copies) and PyInstaller adds a copy of its own: keep one file of each and
    make the rest relative symlinks (30 MB of Vulkan kernels once, not four times). Not on
    Windows, whose DLLs are not versioned this way."""
    if sys.platform == "win32":
        return
    kept: dict[tuple[int, str], Path] = {}
    for path in sorted(bundle.rglob("*.so*"), key=lambda p: (len(p.parts), -len(p.name), str(p))):
        if path.is_symlink() or not path.is_file():
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        first = kept.setdefault((path.stat().st_size, digest), path)
        if first != path:
            path.unlink()
            path.symlink_to(os.path.relpath(first, path.parent))


def built_accelerator() -> str:
    """The GPU backend this environment's llama-cpp-python carries (`cpu` when none): a
    bundle ships exactly that build, so the build decides what a bundle can be."""
    from loreguard.server.inference.devices import built_backends

    built = built_backends()
    return next((a for a in ("cuda", "vulkan", "metal") if a in built), "cpu")


def _state_files_only(folder: str, names: list[str]) -> list[str]:
    """`copytree`'s filter: the prompt state files alone (not the model hash kept beside them)."""
    return [name for name in names if not name.endswith(".lgkv")]


def build_bundle(
    out: Path, model: Path | None = None, *, accelerator: str = "auto", prompts: Path | None = None, log=sys.stderr
) -> BuiltBundle:
    """Freeze the sidecar into `out` (replaced if it exists) and copy `model` into it, with its
    pre-evaluated NPC prompts (`prompts`, by default `<model>.prompts` beside it when there is one:
    `loreguard warm`), which the sidecar reads from beside the bundled model.
    `accelerator`: `auto` ships this environment's build; naming one refuses another build."""
    if importlib.util.find_spec("PyInstaller") is None:
        raise BundleError("PyInstaller is not installed: pip install 'loreguard[bundle]'")
    built = built_accelerator()
    if accelerator not in ("auto", built):
        raise BundleError(
            f"--accelerator {accelerator}: this environment's llama-cpp-python is the {built} build, and a bundle "
            f"ships the build it freezes; rebuild it with LOREGUARD_ACCELERATOR={accelerator} ./dev (docs/gpu.md)"
        )
    if model is not None and not model.is_file():
        raise BundleError(f"no model file at {model}")
    out = out.resolve()
    if out.name != EXECUTABLE:
        # PyInstaller names the folder after the executable; build there, then move.
        target, out = out, out.parent / f".{out.name}.build" / EXECUTABLE
    else:
        target = out
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="loreguard-bundle-") as work:
        command = [sys.executable, "-m", "PyInstaller", *pyinstaller_arguments(out, Path(work))]
        print(f"freezing the sidecar with PyInstaller into {target} ...", file=log, flush=True)
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            raise BundleError(f"PyInstaller failed (exit {done.returncode}):\n{done.stdout[-4000:]}")
    if target != out:
        if target.exists():
            shutil.rmtree(target)
        out.rename(target)
        shutil.rmtree(out.parent)
    _use_the_systems_loaders(target)
    _link_duplicate_libraries(target)
    model_entry = None
    if model is not None:
        (target / "models").mkdir()
        shutil.copy2(model, target / "models" / model.name)
        model_entry = f"models/{model.name}"
        prompts = prompts or (model.with_suffix(".prompts") if model.with_suffix(".prompts").is_dir() else None)
        if prompts is not None:
            shutil.copytree(prompts, target / "models" / model.with_suffix(".prompts").name, ignore=_state_files_only)
    manifest = {
        "format": MANIFEST_FORMAT,
        "loreguard": version("loreguard"),
        "os": os_name(),
        "arch": arch_name(),
        # The addon checks what a Vulkan bundle needs before it launches one (sidecar_bundle.gd).
        "accelerator": built,
        "needs": NEEDS[built],
        "python": ".".join(map(str, sys.version_info[:3])),
        "llama_cpp_python": version("llama_cpp_python"),
        "executable": executable_name(EXECUTABLE),
        "model": model_entry,
    }
    (target / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return BuiltBundle(
        target, target / executable_name(EXECUTABLE), time.monotonic() - started, folder_size(target), accelerator=built
    )
