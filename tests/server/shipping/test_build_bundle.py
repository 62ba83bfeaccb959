"""`loreguard bundle` for real: PyInstaller freezes the sidecar with the embedded model, the
bundle is moved away from where it was built, and it runs with no Python environment at all
(tests/shipping_helpers.py hides the checkout and every Python install where it can)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from factories import say
from godot_helpers import ADDON_PROJECT, DEMO_PROJECT, run_godot
from gpu_helpers import require_gpu, write_small_model
from paths import ROOT
from shipping_helpers import bare_environment, build_machine_paths, isolated, mapped_files, wait_until_ready
from sidecar_helpers import free_port
from waiting import counter, wait_for

from loreguard.client import Client
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.inference.model_files import EMBEDDED_FILE, embedded_model_path
from loreguard.server.shipping.addon_zip import plugin_version, write_addon_zip
from loreguard.server.shipping.bench_bundle import run as run_bench_bundle
from loreguard.server.shipping.build_bundle import EXECUTABLE, NEEDS, build_bundle, built_accelerator
from loreguard.server.shipping.platform_tag import arch_name, os_name

pytestmark = pytest.mark.slow

ADDON = ADDON_PROJECT / "addons" / "loreguard"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle with the embedded model, built in one folder, then moved to a game's folder and
    the build folder renamed away."""
    pytest.importorskip("PyInstaller", reason="loreguard[bundle] (PyInstaller) is not installed")
    base = tmp_path_factory.mktemp("bundle")
    prompts = base / "prompts"  # the demo NPCs' prompts evaluated for shipping (`loreguard warm`)
    warm = [sys.executable, "-m", "loreguard.server.cli", "warm", "--out", str(prompts), "--threads", "2"]
    subprocess.run(warm, check=True, capture_output=True, timeout=600)
    built = build_bundle(base / "build" / EXECUTABLE, embedded_model_path(), prompts=prompts)
    game = base / "game"
    game.mkdir()
    shutil.move(built.folder, game / EXECUTABLE)
    (base / "build").rename(base / "build-renamed-away")
    return game / EXECUTABLE


def _start(bundle: Path, tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    command = [str(bundle / EXECUTABLE), "serve", "--port", str(port), "--data", str(tmp_path / "data"), *args]
    process = subprocess.Popen(
        isolated(command, build_machine_paths()), env=bare_environment(tmp_path / "home"), cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    return process, port


def _stop(process: subprocess.Popen[str]) -> str:
    process.terminate()
    output = process.communicate(timeout=60)[0]
    assert process.returncode == 0, output
    return output


def test_the_manifest_names_this_platform_version_and_model(bundle: Path) -> None:
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert (manifest["os"], manifest["arch"]) == (os_name(), arch_name())
    assert manifest["accelerator"] == built_accelerator() and manifest["needs"] == NEEDS[built_accelerator()]
    # The player's own Vulkan loader, never the build machine's; each library once.
    assert not list(bundle.rglob("libvulkan.so*"))
    libraries = [p for p in (bundle / "_internal" / "llama_cpp" / "lib").iterdir() if not p.is_symlink()]
    assert len({p.name.split(".so")[0] for p in libraries}) == len(libraries)
    assert manifest["loreguard"] == plugin_version(ADDON)
    assert manifest["model"] == f"models/{EMBEDDED_FILE}" and (bundle / manifest["model"]).is_file()
    assert (bundle / "_internal" / "llama_cpp" / "lib").is_dir()


def test_the_bundle_serves_the_scripted_backend_with_no_python_around(bundle: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    # Non-ASCII on purpose: the gate's look-alike table is package data the freeze must carry.
    script.write_text(json.dumps([say("Well met, traveller. Ça va?")]))
    process, port = _start(bundle, tmp_path, "--backend", "scripted", "--script", str(script))
    hello = wait_until_ready(process, port)
    assert hello.server == f"loreguard {plugin_version(ADDON)}"
    # Nothing the running sidecar has mapped comes from the checkout or a Python install.
    hidden = build_machine_paths()
    leaks = {f for f in mapped_files(process.pid) if any(Path(f).is_relative_to(p) for p in hidden)}
    assert not leaks
    with Client(f"tcp://127.0.0.1:{port}", timeout_s=60) as client:
        client.load_world(demo_world())
        client.register_npc(demo_npcs()[0])
        result = client.interact("guard", "Hello.")
    assert result.dialogue == "Well met, traveller. Ça va?"
    _stop(process)


@pytest.mark.model
def test_the_bundle_answers_with_its_own_model(bundle: Path, tmp_path: Path) -> None:
    process, port = _start(bundle, tmp_path, "--reproducible")
    hello = wait_until_ready(process, port)
    assert hello.model is not None and hello.model.file_name == EMBEDDED_FILE
    assert any(f.endswith(EMBEDDED_FILE) and Path(f).is_relative_to(bundle) for f in mapped_files(process.pid))
    with Client(f"tcp://127.0.0.1:{port}", timeout_s=600) as client:
        client.load_world(demo_world())
        client.register_npc(demo_npcs()[0])
        result = client.interact("guard", "Good evening. When does the gate close?")
    assert result.dialogue.strip()
    _stop(process)


def test_the_bundle_restores_the_npc_prompts_shipped_with_it(bundle: Path, tmp_path: Path) -> None:
    shipped = bundle / "models" / Path(EMBEDDED_FILE).with_suffix(".prompts").name
    assert sorted(p.suffix for p in shipped.iterdir()) == [".lgkv", ".lgkv"]  # the state files alone
    process, port = _start(bundle, tmp_path)
    wait_until_ready(process, port)
    with Client(f"tcp://127.0.0.1:{port}", timeout_s=600) as client:
        client.load_world(demo_world())
        for profile in demo_npcs():
            client.register_npc(profile)
            client.warm(profile.id)
        wait_for(lambda: counter(client, "warm.warmed") == 2, "both warm-ups")
        # A new save on a player's first launch: nothing evaluated, both prompts loaded from the bundle.
        assert counter(client, "warm.tokens_evaluated") == 0 and counter(client, "warm.tokens_restored") > 1000
    _stop(process)


@pytest.mark.gpu
def test_the_vulkan_bundle_runs_its_model_on_lavapipe(bundle: Path, tmp_path: Path) -> None:
    """The frozen Vulkan build, away from any Python, with every layer on Vulkan device 0 (the
    session's lavapipe) and a small model (tests/gpu_helpers.py)."""
    require_gpu()
    model = write_small_model(embedded_model_path(), tmp_path / "small.gguf")
    vulkan = {k: v for k, v in os.environ.items() if k.startswith(("GGML_VK_", "VK_"))}
    port = free_port()
    command = [str(bundle / EXECUTABLE), "serve", "--port", str(port), "--data", str(tmp_path / "data"),
               "--model", str(model), "--device", "vulkan:0", "--kv-budget-mib", "32"]  # fmt: skip
    process = subprocess.Popen(
        isolated(command, build_machine_paths()), env={**bare_environment(tmp_path / "home"), **vulkan}, cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    hello = wait_until_ready(process, port)
    assert hello.model is not None and hello.model.extra["device"] == "vulkan:0"
    assert hello.model.extra["offloaded_layers"] == 3
    with Client(f"tcp://127.0.0.1:{port}", timeout_s=600) as client:
        client.load_world(demo_world())
        client.register_npc(demo_npcs()[0])
        assert client.interact("guard", "Who goes there?").dialogue
    assert "on vulkan:0" in _stop(process)


def _demo_from_the_addon_zip(tmp_path: Path) -> Path:
    """The demo project as a user would assemble it: its scenes plus the Asset Library zip."""
    project = tmp_path / "demo"
    shutil.copytree(DEMO_PROJECT, project, ignore=shutil.ignore_patterns(".godot", "addons"), symlinks=True)
    archive = write_addon_zip(ADDON, ROOT / "LICENSE", tmp_path / "addon.zip").path
    with zipfile.ZipFile(archive) as z:
        top = z.namelist()[0].split("/")[0]
        z.extractall(tmp_path / "unzipped")
    shutil.copytree(tmp_path / "unzipped" / top / "addons", project / "addons")
    return project


@pytest.mark.model
def test_the_headless_demo_launches_the_bundle_through_the_launch_setting(bundle: Path, tmp_path: Path) -> None:
    port = free_port()
    env = {
        "LOREGUARD_ADDRESS": f"tcp://127.0.0.1:{port}", "LOREGUARD_AUTO_LAUNCH": "1",
        "LOREGUARD_LAUNCH_MODE": "bundle", "LOREGUARD_BUNDLE_PATH": str(bundle),
        "XDG_DATA_HOME": str(tmp_path / "user-data"),
    }  # fmt: skip
    result = run_godot(["res://tests/talk.tscn"], project=_demo_from_the_addon_zip(tmp_path), timeout=660, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "talk: 2 of 2 answered" in output, output
    # The bundle kept the game's memory in user://, not beside itself.
    assert list((tmp_path / "user-data").rglob("memory.sqlite")), output


def test_a_bundle_that_cannot_load_its_model_is_one_status_line(bundle: Path, tmp_path: Path) -> None:
    broken = tmp_path / EXECUTABLE
    shutil.copytree(
        bundle, broken, copy_function=os.link, symlinks=True
    )  # hard links: quick, and the copy's own model file below
    model = broken / "models" / EMBEDDED_FILE
    model.unlink()
    model.write_bytes(b"GGUF" + bytes(4096))
    env = {
        "LOREGUARD_ADDRESS": f"tcp://127.0.0.1:{free_port()}", "LOREGUARD_AUTO_LAUNCH": "1",
        "LOREGUARD_LAUNCH_MODE": "bundle", "LOREGUARD_BUNDLE_PATH": str(broken),
        "XDG_DATA_HOME": str(tmp_path / "user-data"),
    }  # fmt: skip
    result = run_godot(["-s", "res://tests/launch_probe.gd"], project=ADDON_PROJECT, timeout=300, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "launch probe: problem: the sidecar exited before it answered" in output, output


@pytest.mark.model
def test_bench_bundle_times_both_cold_starts_on_the_same_model(bundle: Path) -> None:
    figures = run_bench_bundle(bundle, None, runs=1)
    assert figures["model"] == EMBEDDED_FILE
    assert float(figures["bundle_size_mib"]) > float(figures["bundle_size_without_model_mib"]) > 0
    assert float(figures["cold_start_bundle_s"]) > 0 and float(figures["cold_start_venv_s"]) > 0
