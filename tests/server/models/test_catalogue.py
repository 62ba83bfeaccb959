from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from loreguard.server.cli import main
from loreguard.server.models.catalogue import COMPUTE_OVERHEAD_MIB, CatalogueEntry, RegistryPackages, load_catalogue


def _billions(params: str) -> float:
    return float(params.rstrip("B"))


def test_the_catalogue_spans_small_to_8b_instruct_q4_k_m_models() -> None:
    models = load_catalogue().models
    assert len(models) >= 5
    sizes = [_billions(m.params) for m in models]
    assert min(sizes) <= 0.5 and max(sizes) >= 8
    for m in models:
        assert m.file.lower().endswith("q4_k_m.gguf"), m.name
        assert m.stop_tokens and m.note and m.licence
        # Room for a prompt plus the longest reply the output grammar allows (about 2.4k tokens).
        assert 0 < m.sampling.top_p <= 1 and m.context >= 4096


def test_a_pinned_checksum_comes_with_a_pinned_commit_and_size() -> None:
    """A sha256 names one version of a file: following `main` would break it on the next upload.
    An entry that also comes from the package registry pins the registry's bytes (a package
    version never changes); its Hub copy on `main` is checked against the same hash, so a
    re-upload is refused and removed, never loaded."""
    for m in load_catalogue().models:
        if m.sha256 is not None:
            assert m.registry is not None or re.fullmatch(r"[0-9a-f]{40}", m.revision), m.name
            assert m.size_bytes is not None, m.name
        else:
            assert m.size_mib is not None, m.name


def test_memory_is_weights_plus_kv_at_the_default_context_plus_buffers() -> None:
    m = load_catalogue().get("llama-3.2-3b")
    assert m is not None
    assert m.kv_mib == 4096 * 114688 // 2**20 == 448
    assert m.memory_mib == m.download_mib + 448 + COMPUTE_OVERHEAD_MIB


@pytest.mark.parametrize(
    ("typed", "first"), [("lama-3.2-3b", "llama-3.2-3b"), ("qwen2.5-3b", "qwen2.5-1.5b"), ("gemma", "gemma-3-4b")]
)
def test_closest_names_for_a_typo(typed: str, first: str) -> None:
    assert load_catalogue().closest(typed)[0] == first


def test_models_list_prints_every_entry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    for m in load_catalogue().models:
        assert m.name in out and m.repo in out and m.file in out and m.licence in out


def test_models_list_installed_shows_the_embedded_model_and_the_cache(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "list", "--installed"]) == 0
    out = capsys.readouterr().out
    assert "(embedded) smollm2-135m" in out and "Hub cache:" in out


def test_registry_sources_are_checked_when_the_catalogue_loads() -> None:
    entry = next(m for m in load_catalogue().models if m.registry is not None)
    with pytest.raises(ValidationError, match="needs the pinned size_bytes and sha256"):
        CatalogueEntry.model_validate({**entry.model_dump(), "sha256": None, "size_mib": 500})
    assert entry.registry is not None
    for bad in ({"package": "fake-model"}, {"member": "data/part.bin"}, {"member": "part{n}{x}.bin"}, {"parts": 0}):
        with pytest.raises(ValidationError):
            RegistryPackages.model_validate({**entry.registry.model_dump(), **bad})


def test_every_registry_entry_in_the_catalogue_is_pinned() -> None:
    """A registry download is someone else's repackaging: only the pinned upstream size and sha256 make it trustworthy."""
    entries = [m for m in load_catalogue().models if m.registry is not None]
    assert entries
    for m in entries:
        assert m.size_bytes is not None and m.sha256 is not None, m.name
        assert m.registry is not None and "{n}" in m.registry.package and m.registry.parts >= 1
