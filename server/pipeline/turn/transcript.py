"""The transcript: how an exchange is written into an NPC's memory (the exchange's text, the
reply as the model wrote it, the tags) and read back into the next prompt (the conversation
window, the new message, the recent replies the repeat check compares, the changes replayed
replies already made). `mutation` writes it and `snapshot` reads it; both ask this module, so
the two sides cannot drift apart. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import lru_cache

from loreguard.schemas.base import FrozenModel, JsonScalar
from loreguard.schemas.interaction import InteractionContext, SceneLine
from loreguard.schemas.memory import EpisodicEntry
from loreguard.schemas.output import NO_INTENT, EmitWorldIntentMutation, Emotion, ProposedMutation

#: Episodic entries with this tag are raw exchanges; the prompt shows them in their own section.
EXCHANGE_TAG = "exchange"
#: Episodic entries the model wrote (approved `append_episodic` changes).
MODEL_TAG = "model"
#: Episodic entries of what an NPC heard said in a scene it was present at (`scene_tag` too).
HEARD_TAG = "heard"


def scene_tag(scene_id: str, run: int) -> str:
    """The tag of every memory a scene wrote (`run`: which of the scenes with that id): while
    the scene goes on, its lines are in the conversation itself, so the memory section leaves
    these out; other scenes' memories, under the same id too, are memories like any other."""
    return f"scene:{scene_id}@{run}"


def listeners(context: InteractionContext) -> tuple[str, ...]:
    """The NPCs besides the speaker who hear the line and remember it (a scene's present)."""
    return tuple(m.npc_id for m in context.scene_turn.present) if context.scene_turn is not None else ()


def conversation_window(n_exchanges: int, max_exchanges: int) -> int:
    """Index of the first of `n_exchanges` the prompt shows.

    The window moves in steps of half its size rather than a line per turn, so the lines it
    starts with, and every byte of the prompt after them, stay the same for several turns (the
    batched engine reuses them instead of evaluating the whole conversation again each turn).
    Once there are more than `max_exchanges`, it shows between half and all of them.
    """
    overflow = n_exchanges - max_exchanges
    if overflow <= 0:
        return 0
    step = max(1, max_exchanges // 2)
    return -(-overflow // step) * step


def exchange_text(npc_name: str, player_input: str, dialogue: str | None = None) -> str:
    """One line of the conversation as memory keeps it, for people: `Player: "..." / Name: "..."`.
    The prompt replays the exchange from its `turn` instead."""
    speaker = f'Player: "{player_input}" / {npc_name}:' if player_input else f"{npc_name}:"
    return speaker if dialogue is None else f'{speaker} "{dialogue}"'


def player_message(player_input: str) -> str:
    """The player's side of a turn, as the prompt's last message and as memory keeps it."""
    return f'Player: "{player_input}"' if player_input else "Player: (says nothing)"


#: The last line of a scene's new message: the speaker's turn, in its own words only.
SCENE_CUE = "Say only your own next line, in your own words, answering what was just said."
#: A scene's new message before anyone has spoken.
SCENE_OPENING = "(Nobody has spoken yet. You begin.)"


def scene_line_text(line: SceneLine) -> str:
    """One line of a scene as the NPCs present heard it and as memory keeps it."""
    return f'{line.speaker}: "{line.text}"'


def new_message(context: InteractionContext) -> str:
    """What the NPC answers, as the prompt's last message: the player's line, or in a scene
    the lines it heard since it last spoke, one per row."""
    if context.scene_turn is None:
        return player_message(context.player_input)
    heard = "\n".join(scene_line_text(line) for line in context.scene_turn.heard) or SCENE_OPENING
    return f"{heard}\n{SCENE_CUE}"


def turn_reply(dialogue: str, emotion: Emotion, mutations: Iterable[ProposedMutation]) -> str:
    """The NPC's side of a turn as the model writes it: one JSON object in the output grammar's
    layout (`json.dumps` separators, keys in schema order), holding what was spoken, the intent
    granted (the first approved one; "none") and the other changes that were approved. A reply
    accepted whole is then the model's own bytes."""
    changes = list(mutations)
    granted = next((m for m in changes if isinstance(m, EmitWorldIntentMutation)), None)
    value = {
        "dialogue": dialogue,
        "intent": intent_value(granted.intent, granted.params) if granted is not None else NO_INTENT,
        "emotion": emotion.value,
        "mutations": [m.model_dump(mode="json") for m in changes if m is not granted],
    }
    return json.dumps(value, ensure_ascii=False)


def intent_value(intent: str, params: Mapping[str, JsonScalar]) -> dict[str, object]:
    """A granted intent as the output writes it: parameters by name, as the grammar orders them."""
    return {"type": intent, "params": {name: params[name] for name in sorted(params)}}


class RecentReply(FrozenModel):
    """One of the NPC's recent replies, with the player's line it answered: what the gate
    compares a new reply with, so an NPC does not say the same thing to every question."""

    player: str
    dialogue: str


def recent_replies(exchanges: Iterable[EpisodicEntry], npc_name: str, window: int) -> tuple[RecentReply, ...]:
    """The last `window` of `exchanges` (memory's order, oldest first) as replies, newest first.
    The dialogue is the reply's as spoken (the turn's JSON); the player's line is read back from
    the exchange's text (`exchange_text`), "" when it cannot be."""
    recent = list(exchanges)[-window:] if window else []
    return tuple(_recent_reply(e.text, e.turn.reply, npc_name) for e in reversed(recent) if e.turn is not None)


@lru_cache(maxsize=4096)
def _recent_reply(text: str, reply: str, npc_name: str) -> RecentReply:
    """Memoised: the same few exchanges are read back turn after turn."""
    dialogue = _reply_dialogue(reply)
    ending = f'" / {npc_name}: "{dialogue}"'
    head = 'Player: "'
    player = text[len(head) : -len(ending)] if text.startswith(head) and text.endswith(ending) else ""
    return RecentReply(player=player, dialogue=dialogue)


def _reply_dialogue(reply: str) -> str:
    try:
        dialogue = json.loads(reply).get("dialogue", "")
    except (ValueError, AttributeError):
        return ""
    return dialogue if isinstance(dialogue, str) else ""


def replayed_changes(exchanges: Iterable[EpisodicEntry]) -> tuple[set[str], set[tuple[str, str]]]:
    """Episodic notes (texts) and beliefs (id, content) that replayed replies write."""
    noted: set[str] = set()
    believed: set[tuple[str, str]] = set()
    for exchange in exchanges:
        if exchange.turn is None:
            continue
        notes, beliefs = reply_changes(exchange.turn.reply)
        noted.update(notes)
        believed.update(beliefs)
    return noted, believed


@lru_cache(maxsize=1024)
def reply_changes(reply: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The notes and beliefs one reply writes. Memoised on the reply's text: the same few
    exchanges are replayed turn after turn, and parsing them each time was most of the cost."""
    notes: list[str] = []
    beliefs: list[tuple[str, str]] = []
    for change in json.loads(reply).get("mutations", []):
        if change.get("kind") == "append_episodic":
            notes.append(change.get("text", ""))
        elif change.get("kind") == "transform_belief":
            beliefs.append((change.get("target", ""), change.get("content", "")))
    return tuple(notes), tuple(beliefs)


def said_in(npc_name: str, entry: EpisodicEntry) -> str:
    """What a memory says, for telling repeats apart: an exchange is the player's line it answered
    (`exchange_text`), so ten answers to "How is the weather?" are one thing said."""
    if EXCHANGE_TAG not in entry.tags:
        return entry.text
    end = entry.text.find(f'" / {npc_name}:')
    return entry.text[: end + 1] if end >= 0 else entry.text
