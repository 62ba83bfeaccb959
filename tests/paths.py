"""Where things are, for tests in any folder of the mirrored tree."""

from __future__ import annotations

from pathlib import Path

#: The tests/ folder, which holds the shared helpers (factories, waiting, ...).
TESTS = Path(__file__).resolve().parent
#: The repository root.
ROOT = TESTS.parent
