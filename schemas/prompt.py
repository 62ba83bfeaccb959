"""The prompt as the governance plane hands it to a model backend.

It lives here, below every stage, so that backends (stage 6) can take a prompt without knowing
how one is assembled (stage 5, `loreguard.server.pipeline.prompt`).
"""

from __future__ import annotations

import hashlib

from loreguard.schemas.base import FrozenModel
from loreguard.schemas.memory import ExchangeTurn

#: The headings of the sections a new message can start with. A warm-up
#: (`InferenceBackend.warm`) caches the prompt before its new message and may assume only that
#: one of these follows.
WORLD_STATE_HEADING = "### World state\n"
BELIEFS_HEADING = "### What you believe\n"
MEMORIES_HEADING = "### What you remember\n"
SITUATION_HEADING = "### Now\n"
NEW_MESSAGE_HEADINGS = (WORLD_STATE_HEADING, BELIEFS_HEADING, MEMORIES_HEADING, SITUATION_HEADING)


class Prompt(FrozenModel):
    #: The system message.
    static_prefix: str
    #: What opens the first user message: rules (and facts, with an early boundary). The whole
    #: user message when `turns` and `player_turn` are empty, as for judge prompts.
    dynamic_suffix: str
    manifest: str
    context_keys: tuple[str, ...]
    over_budget: bool = False
    #: Earlier turns of the conversation, oldest first.
    turns: tuple[ExchangeTurn, ...] = ()
    #: The new message: world state, memories, the situation, the player's line and, on a
    #: retry, the correction.
    player_turn: str = ""

    def messages(self) -> list[dict[str, str]]:
        """The prompt as chat messages (`role`, `content`), for chat templates and chat APIs."""
        messages = [{"role": "system", "content": self.static_prefix}]
        opening = self.dynamic_suffix
        for turn in self.turns:
            messages.append({"role": "user", "content": opening + turn.player})
            messages.append({"role": "assistant", "content": turn.reply})
            opening = ""
        messages.append({"role": "user", "content": opening + self.player_turn})
        return messages

    def before_new_message(self) -> Prompt:
        """The prompt less its new message: what every interaction of the NPC shares until its
        profile, facts, rules or conversation change, and what a warm-up caches."""
        return self.model_copy(update={"player_turn": ""})

    @property
    def full(self) -> str:
        """Every message's text in order, a turn a line each: what the prompt hash covers."""
        turns = "".join(f"{turn.player}\n{turn.reply}\n" for turn in self.turns)
        return self.static_prefix + self.dynamic_suffix + turns + self.player_turn

    def prompt_hash(self) -> str:
        return hashlib.sha256(self.full.encode("utf-8")).hexdigest()
