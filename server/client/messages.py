"""Request bodies and reply models shared by the sync and asyncio clients."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from loreguard.schemas.interaction import InteractionContext
from loreguard.schemas.wire import MESSAGES


def body_of(value: BaseModel | dict[str, Any] | None) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_defaults=True)
    return dict(value)


def interact_body(
    npc_id: str | InteractionContext, player_input: str = "", trigger_reason: str = "player_utterance", **fields: Any
) -> dict[str, Any]:
    if isinstance(npc_id, InteractionContext):
        return body_of(npc_id)
    return {"npc_id": npc_id, "trigger_reason": trigger_reason, "player_input": player_input, **fields}


def parse_reply(message_type: str, body: dict[str, Any]) -> Any:
    return MESSAGES[message_type].reply.model_validate(body)
