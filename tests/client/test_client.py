"""The Python client, sync and asyncio, against a real sidecar on loopback: the same calls give
the same typed replies, and every protocol error is its own exception class."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sidecar_helpers import free_port, running_sidecar

from loreguard.client import AsyncClient, Client, Invalid, LoreguardError, NoReply, NotFound, StorageUnavailable
from loreguard.client.errors import ERRORS
from loreguard.schemas import InteractionResult
from loreguard.schemas.wire import ErrorCode, InteractChunk


def test_every_error_code_has_its_exception_class() -> None:
    assert sorted(ERRORS) == sorted(code.value for code in ErrorCode)
    assert all(issubclass(cls, LoreguardError) for cls in ERRORS.values())


def test_the_sync_client_talks_streams_and_raises_typed_errors(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=30) as lg:
        assert 1 in lg.hello().protocol_versions
        lg.warm("guard", wait_s=60)
        said = lg.interact("guard", "Good evening.")
        assert isinstance(said, InteractionResult) and said.dialogue == "Well met, traveller."
        items = list(lg.interact_stream("guard", "Is the road safe?"))
        assert all(isinstance(i, InteractChunk) for i in items[:-1]) and isinstance(items[-1], InteractionResult)
        assert "".join(i.text for i in items[:-1]) == items[-1].dialogue
        assert lg.memory("guard").interactions == 2 and lg.stats().counters["interact.validated"] == 2
        with pytest.raises(NotFound):
            lg.interact("nobody", "Hello?")
        with pytest.raises(Invalid) as invalid:
            lg.interact("guard", "Hello?", trigger_reason="daydream")
        assert invalid.value.details and invalid.value.request_id is not None
        # A write the disk refuses: StorageUnavailable, with the fault and the reason in words.
        sidecar.store.db.execute(
            "CREATE TEMP TRIGGER full BEFORE INSERT ON audit BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
        )
        with pytest.raises(StorageUnavailable) as refused:
            lg.interact("guard", "Still there?")
        assert (refused.value.fault, refused.value.reason) == ("disk_full", "the disk is full")
        assert lg.memory("guard").interactions == 2


def test_the_async_client_gives_the_same_replies(tmp_path: Path) -> None:
    async def play(address: str) -> tuple[str, str, int]:
        async with AsyncClient(address, timeout_s=30) as lg:
            await lg.warm("guard", wait_s=60)
            said = await lg.interact("guard", "Good evening.")
            streamed = [item async for item in lg.interact_stream("guard", "Is the road safe?")]
            with pytest.raises(NotFound):
                await lg.interact("nobody", "Hello?")
            assert isinstance(streamed[-1], InteractionResult)
            return said.dialogue, streamed[-1].dialogue, (await lg.memory("guard")).interactions

    with running_sidecar(tmp_path) as sidecar:
        assert asyncio.run(play(sidecar.address)) == ("Well met, traveller.", "Well met, stranger.", 2)


def test_no_sidecar_is_no_reply_not_a_hang() -> None:
    with Client(f"tcp://127.0.0.1:{free_port()}", timeout_s=0.5) as lg, pytest.raises(NoReply):
        lg.hello()

    async def ask() -> None:
        async with AsyncClient(f"tcp://127.0.0.1:{free_port()}", timeout_s=0.5) as lg:
            await lg.hello()

    with pytest.raises(NoReply):
        asyncio.run(ask())
