"""`--model auto`: the strongest model this machine serves within a latency bar, and why.

A player judges an NPC first by how long it takes to say anything. So `auto` takes the strongest
catalogue model whose first validated words (`bench first-line`'s `warmed` mode: the NPC's prompt
warmed into the cache when the scene loaded, as the addon's `warm_up` and the demo do) are
expected within `BAR_S` on this placement, among those installed (or installable, where downloading is allowed),
and falls back to the embedded 135M model, which is always there. The expectation comes from
measurement: an entry's `first_words` holds the seconds it took on a given number of CPU cores,
scaled here to this machine's cores; an entry without a figure is never picked, since nobody
knows whether it would keep a player waiting.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from loreguard.server.models.catalogue import Catalogue, CatalogueEntry, load_catalogue

#: The longest wait for a first line a player accepts, in seconds, on the CPU and on a GPU.
BAR_S = {"cpu": 8.0, "gpu": 3.0}
#: Past this many cores a CPU's prefill stops scaling with them (memory bandwidth).
SCALING_CORES = 8
#: A GPU offload is taken to be at least as fast as this many CPU cores, for an entry with no GPU
#: figure of its own (a conservative bound: a 1.5B model offloaded decodes at hundreds of tokens
#: a second on any discrete GPU).
GPU_AS_CORES = 16


@dataclass(frozen=True)
class AutoPick:
    #: The catalogue entry chosen; None: the embedded model.
    entry: CatalogueEntry | None
    #: One line saying which and why.
    reason: str

    @property
    def model(self) -> str | None:
        """What `--model` resolves to: the entry's name, or None for the embedded model."""
        return self.entry.name if self.entry is not None else None


def machine_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def expected_first_words_s(entry: CatalogueEntry, *, on_gpu: bool, cores: int) -> float | None:
    """Seconds to the first validated words expected on this placement; None where unmeasured."""
    measured = entry.first_words
    if measured is None:
        return None
    if on_gpu and measured.gpu_s is not None:
        return measured.gpu_s
    effective = GPU_AS_CORES if on_gpu else min(max(cores, 1), SCALING_CORES)
    return measured.cpu_s * min(measured.cpu_cores, SCALING_CORES) / effective


def _strength(entry: CatalogueEntry) -> float:
    """Parameters in billions ("1.5B" -> 1.5): more is stronger, at the catalogue's one quantisation."""
    return float(entry.params.rstrip("Bb"))


def pick_model(
    *,
    on_gpu: bool,
    installed: frozenset[str],
    may_download: bool,
    cores: int | None = None,
    catalogue: Catalogue | None = None,
) -> AutoPick:
    """The strongest measured entry expected within the bar, installed (`installed` holds their
    names) or installable when `may_download`; else the embedded model. Pure: the caller says what
    is installed and where the model runs."""
    cores = machine_cores() if cores is None else cores
    where = "a GPU" if on_gpu else f"{cores} CPU core{'s' if cores != 1 else ''}"
    bar = BAR_S["gpu" if on_gpu else "cpu"]
    passed_over: list[str] = []
    measured = [e for e in (catalogue or load_catalogue()).models if e.first_words is not None]
    for entry in sorted(measured, key=lambda e: (-_strength(e), e.name)):
        expected = expected_first_words_s(entry, on_gpu=on_gpu, cores=cores)
        assert expected is not None
        if expected > bar:
            passed_over.append(f"{entry.name} would take ~{expected:.0f} s")
            continue
        if entry.name not in installed and not may_download:
            passed_over.append(f"{entry.name} is not installed (`loreguard models pull {entry.name}`, or --yes)")
            continue
        why = f"~{expected:.1f} s to its first words on {where} once warmed, within {bar:.0f} s"
        if entry.name not in installed:
            why += f"; downloading it once ({entry.download_mib} MiB)"
        if passed_over:  # the stronger ones, and why not them
            why += "; " + "; ".join(passed_over)
        return AutoPick(entry, f"model: {entry.name}, the strongest that answers in time here ({why})")
    because = "; ".join(passed_over) or "no catalogue model has a measured latency"
    return AutoPick(None, f"model: the embedded smollm2-135m ({because}; bar {bar:.0f} s on {where})")
