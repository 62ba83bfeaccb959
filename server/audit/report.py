"""Plain-text views of audit records and replay results, for the terminal."""

from __future__ import annotations

import difflib

from loreguard.schemas.audit import AuditRecord
from loreguard.schemas.receipt import GateName, ModelFingerprint
from loreguard.server.audit.replay import RecordReplay, ReplayReport


def record_line(record: AuditRecord) -> str:
    """One line per interaction: who, what was said, what the gate decided, how long it took."""
    r = record.receipt
    failed = sorted({check.gate.value for a in r.attempts for check in a.gates if not check.passed})
    scene = record.context.scene_turn
    if scene is not None:  # a scene's line answers what its speaker heard since it last spoke
        heard = " / ".join(f"{line.speaker}: {line.text}" for line in scene.heard)
        said = f"[scene {scene.scene_id} #{scene.line}] {heard}"
    else:
        said = record.context.player_input or f"<{record.context.trigger_reason.value}>"
    return (
        f"{record.record_id:>6} {record.npc_id:<10} {_clip(said, 40)!r} -> {_clip(record.dialogue, 60)!r} "
        f"[{r.outcome.value}, {len(r.attempts)} attempt(s), failed: {','.join(failed) or '-'}"
        f"{', fallback' if r.fallback_used else ''}] {record.timings.total_ms:.0f} ms"
    )


def stream_lines(record: AuditRecord) -> list[str]:
    """For a streamed interaction: each attempt's chunks (where they lie in the dialogue, when
    they went out), where the stream was cut and why, and whether the next attempt went on from
    the words released."""
    lines = []
    attempts = record.receipt.attempts
    for i, a in enumerate(attempts):
        if a.stream is None:
            continue
        chunks = ", ".join(f"#{r.seq} [{r.start}:{r.end}] at {r.released_ms:.0f} ms" for r in a.stream.releases)
        continuing = f" (continuing the {a.stream.continued_chars} characters released)" if a.stream.continued_chars else ""
        lines.append(
            f"stream attempt {a.attempt}{continuing}: {chunks or 'nothing released'}"
            f"{' (generation stopped early)' if a.stream.aborted else ''}"
        )
        if a.stream.cut is not None:
            cut = a.stream.cut
            after = attempts[i + 1].stream if i + 1 < len(attempts) else None
            if not cut.released_chars:
                kept = "nothing released"
            elif after is not None and after.continued_chars:
                kept = f"the next attempt continued the {cut.released_chars} characters released"
            else:
                kept = f"reply cut back to the {cut.released_chars} characters released"
            lines.append(f"  cut at dialogue character {cut.at_char}: {cut.reason} ({kept})")
    return lines


def summary_lines(report: ReplayReport) -> list[str]:
    first = report.first_drift
    lines = [
        f"mode: {report.mode.value}",
        f"model: {'same as recorded' if report.model_matches else 'DIFFERENT from recorded'}"
        f" ({_model(report.recorded_model)} -> {_model(report.current_model)})",
        f"records: {len(report.results)}",
        f"exact_matches: {report.exact_matches}",
        f"drifts: {report.drifts}",
        f"first_drift: {_first(first)}",
    ]
    if report.stopped_early:
        lines.append("stopped: at the first drift (--stop-on-drift)")
    return lines


def result_lines(result: RecordReplay, *, verbose: bool = False) -> list[str]:
    """A record's verdict; for a drift (or with `verbose`) the differences, a unified diff of
    the prompts and a gate-by-gate table."""
    rec = result.recorded
    head = f"{rec.record_id} {rec.npc_id} interaction {rec.receipt.interaction_index}: "
    head += "exact" if result.exact else f"DRIFT {', '.join(k.value for k in result.kinds)}"
    lines = [head]
    lines += [f"  {detail}" for detail in result.details]
    lines += [f"  {line}" for line in stream_lines(rec)]
    if result.replayed is None or (result.exact and not verbose):
        return lines
    lines += [f"  {line}" for line in prompt_diff(rec, result.replayed)]
    lines += [f"  {line}" for line in gate_table(rec, result.replayed)]
    return lines


def prompt_diff(recorded: AuditRecord, replayed: AuditRecord) -> list[str]:
    lines: list[str] = []
    for n in range(max(len(recorded.prompts), len(replayed.prompts))):
        a = recorded.prompts[n] if n < len(recorded.prompts) else ""
        b = replayed.prompts[n] if n < len(replayed.prompts) else ""
        if a == b:
            continue
        lines += difflib.unified_diff(
            a.splitlines(),
            b.splitlines(),
            f"recorded prompt, attempt {n + 1}",
            f"replayed prompt, attempt {n + 1}",
            lineterm="",
            n=1,
        )
    return lines


def gate_table(recorded: AuditRecord, replayed: AuditRecord) -> list[str]:
    """attempt, gate, recorded verdict, replayed verdict; failures with their reasons."""
    rows = [("attempt", "gate", "recorded", "replayed")]
    before, after = _verdicts(recorded), _verdicts(replayed)
    for key in sorted(set(before) | set(after), key=lambda k: (k[0], _GATE_ORDER.get(k[1], len(_GATE_ORDER)))):
        rows.append((str(key[0]), key[1], before.get(key, "-"), after.get(key, "-")))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    table = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    for label, record in (("recorded", recorded), ("replayed", replayed)):
        for attempt in record.receipt.attempts:
            for failure in attempt.failures:
                table.append(f"{label} attempt {attempt.attempt} {failure.gate.value}: {failure.reason}")
    return table


_GATE_ORDER = {gate.value: i for i, gate in enumerate(GateName)}


def _verdicts(record: AuditRecord) -> dict[tuple[int, str], str]:
    return {
        (a.attempt, check.gate.value): "pass" if check.passed else f"FAIL({check.failures})"
        for a in record.receipt.attempts
        for check in a.gates
    }


def _first(result: RecordReplay | None) -> str:
    if result is None:
        return "none"
    rec = result.recorded
    return f"{rec.record_id} ({rec.npc_id}, interaction {rec.receipt.interaction_index}): {result.kind.value}"


def _model(fingerprint: ModelFingerprint | None) -> str:
    if fingerprint is None:
        return "none"
    return fingerprint.file_name or fingerprint.backend


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


__all__ = ["gate_table", "prompt_diff", "record_line", "result_lines", "stream_lines", "summary_lines"]
