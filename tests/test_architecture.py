"""Layering the code relies on, checked in a fresh interpreter so nothing imported earlier hides a violation."""

from __future__ import annotations

import subprocess
import sys


def _modules_after_import(module: str) -> set[str]:
    script = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def test_the_pipeline_knows_no_audit_package() -> None:
    """The pipeline talks to a recorder only through its own `AuditSink` protocol."""
    loaded = _modules_after_import("loreguard.server.pipeline.lifecycle")
    assert not {m for m in loaded if m.startswith("loreguard.server.audit")}


def test_memory_knows_nothing_above_it() -> None:
    loaded = _modules_after_import("loreguard.memory")
    assert not {m for m in loaded if m.startswith(("loreguard.server", "loreguard.client"))}


def test_the_client_needs_no_sidecar_code() -> None:
    loaded = _modules_after_import("loreguard.client")
    assert not {m for m in loaded if m.startswith(("loreguard.server", "loreguard.memory"))}
