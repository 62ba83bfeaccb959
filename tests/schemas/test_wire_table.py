"""One table of wire messages (`loreguard.schemas.wire.MESSAGES`) drives the sidecar's dispatch,
the Python client and the Godot client: a message added to one and not the others fails here."""

from __future__ import annotations

import inspect
import re

from paths import ROOT

from loreguard.client import AsyncClient, Client, calls
from loreguard.schemas.wire import MESSAGES

ADDON = ROOT / "godot_addon" / "addons" / "loreguard"


def _sent_by(source: str, pattern: str) -> set[str]:
    return set(re.findall(pattern, source))


def test_the_python_client_has_a_method_for_every_message() -> None:
    sent = _sent_by(inspect.getsource(calls), r'_call\(\s*"([a-z_.]+)"')
    assert sent == set(MESSAGES)
    for name, function in inspect.getmembers(calls, inspect.isfunction):
        if (
            function.__module__ == calls.__name__
            and not name.startswith("_")
            and name not in ("body_of", "is_chunk", "reply_wait_s")
        ):
            assert callable(getattr(Client, name)) and inspect.iscoroutinefunction(getattr(AsyncClient, name)), name


def test_the_godot_addon_speaks_exactly_the_messages_of_the_table() -> None:
    source = "\n".join(path.read_text() for path in sorted(ADDON.rglob("*.gd")))
    sent = _sent_by(source, r'request\(\s*"([a-z_.]+)"')
    assert sent == set(MESSAGES), f"missing in the addon: {sorted(set(MESSAGES) - sent)}; unknown: {sorted(sent - set(MESSAGES))}"
