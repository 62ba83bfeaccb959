"""The client's methods, written once: `_call` returns the reply (sync) or a coroutine (asyncio)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from loreguard.client.messages import body_of, interact_body
from loreguard.schemas.interaction import InteractionContext
from loreguard.schemas.npc import NpcProfile, WorldDefinition

DEFAULT_ADDRESS = "tcp://127.0.0.1:7878"


class ClientApi(ABC):
    @abstractmethod
    def _call(self, message_type: str, body: dict[str, Any]) -> Any:
        """Send one request; the reply model (sync) or an awaitable of it (asyncio)."""

    def hello(self, client: str = "loreguard.client") -> Any:
        """Versions, capabilities, model fingerprint and limits (`HelloReply`)."""
        return self._call("hello", {"client": client})

    def load_world(self, world: WorldDefinition | dict[str, Any]) -> Any:
        return self._call("world.load", body_of(world))

    def register_npc(self, profile: NpcProfile | dict[str, Any]) -> Any:
        return self._call("npc.register", body_of(profile))

    def set_state(self, values: dict[str, Any], *, npc_id: str | None = None, remove: tuple[str, ...] = ()) -> Any:
        """Game-system world state; `npc_id=None` writes the world scope."""
        return self._call("world.set_state", {"npc_id": npc_id, "values": values, "remove": list(remove)})

    def interact(
        self, npc_id: str | InteractionContext, player_input: str = "", trigger_reason: str = "player_utterance", **fields: Any
    ) -> Any:
        """One NPC line (`InteractionResult`): validated dialogue, approved intents, the receipt."""
        return self._call("interact", interact_body(npc_id, player_input, trigger_reason, **fields))

    def memory(self, npc_id: str) -> Any:
        return self._call("memory.get", {"npc_id": npc_id})

    def save(self, slot: str) -> Any:
        return self._call("save", {"slot": slot})

    def load(self, slot: str) -> Any:
        return self._call("load", {"slot": slot})

    def audit_tail(self, npc_id: str | None = None, limit: int = 20, after: int | None = None) -> Any:
        """Recent audit records; with `after` (a log position), the ones after it."""
        return self._call("audit.tail", {"npc_id": npc_id, "limit": limit, "after": after})

    def audit_export(
        self,
        npc_id: str | None = None,
        last: int | None = None,
        first_seq: int | None = None,
        last_seq: int | None = None,
        form: str = "document",
    ) -> Any:
        """A debug package: the document (`package`), or with form "json" the file's `text`;
        `loreguard.server.audit.package` reads either."""
        body = {"npc_id": npc_id, "last": last, "first_seq": first_seq, "last_seq": last_seq, "form": form}
        return self._call("audit.export", body)

    def stats(self) -> Any:
        return self._call("stats", {})


__all__ = ["DEFAULT_ADDRESS", "ClientApi"]
