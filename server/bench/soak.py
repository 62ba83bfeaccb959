"""`loreguard bench soak`: a long game with the scripted model, window by window.

Fifty NPCs, played as a player plays them: a few (the shopkeeper, the companion) get most of the
lines, most get a handful (Zipf weights). Early on the player tells NPCs things worth keeping
(the planted memories: a relative, an object, a hiding place, each with invented names); the
rest is small talk, some of it about the same relatives and objects, so that a memory has to be
found among look-alikes. The scripted model answers every line with a varied reply and, every
second turn, a memory note in the model's words. The game saves and loads along the way.

Per window it prints governance latency (p50, p99), the database's size and the process's RSS;
at the end a replay of the last window, a save and a load, and recall@5: for each planted
memory, asked about after everything else, whether one of the five memories the prompt holds
first names the hiding place.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loreguard.memory import MemoryPolicy, MemoryStore
from loreguard.schemas import InteractionContext, NpcProfile, WorldDefinition
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.pipeline.inference import ScriptedBackend
from loreguard.server.sidecar.stats import percentile

_RELATIONS = ("sister", "brother", "cousin", "uncle", "aunt", "friend", "mother", "father", "daughter", "son")
_OBJECTS = ("compass", "ledger", "ring", "dagger", "map", "locket", "key", "flute", "seal", "lantern", "amulet", "coin")
_HIDE_VERBS = (("hid", "hide"), ("buried", "bury"), ("left", "leave"), ("stored", "store"))
_PLACES = ("mill", "chapel", "well", "orchard", "bridge", "tannery", "barracks", "quarry", "harbour", "granary")
_FILLER = (
    "What do you sell today?",
    "Any news from the road?",
    "How is the weather looking?",
    "Have you seen any wolves near the {place}?",
    "Do you have a {object} for sale?",
    "My {relation} says hello.",
    "Where can I hide from the rain?",
    "Is the {place} open at night?",
    "I lost my {object} somewhere, have you seen one?",
    "Tell me about the {place}.",
    "What do people say about the king?",
    "Can you mend my boots?",
)
_OPENERS = ("Aye,", "Well,", "Hm,", "Listen,", "Truly,", "Friend,", "Ah,", "So,", "Look,")
_BODIES = (
    "the roads are quiet this week",
    "trade has been slow since the frost",
    "the river ran high after the storm",
    "the watch doubled its rounds",
    "the baker raised her prices again",
    "a caravan came through at dawn",
    "the old songs say the same",
    "nobody here can tell you more than that",
    "the bells rang twice last night",
    "I keep my eyes on the gate",
    "folk talk, but little of it is true",
)
#: Short enough (under the gate's `min_repeat_words`) to close many replies in a row.
_CLOSERS = ("Mind yourself.", "Safe travels.", "Be careful.", "Farewell then.", "Go well.", "Stay warm.")


@dataclass(frozen=True)
class Planted:
    """A memory worth keeping: told to `npc_id` early, asked about at the end."""

    npc_id: str
    telling: str
    question: str
    #: The word only the planted memory holds (the hiding place's invented name).
    answer: str


def _invented(rng: random.Random, taken: set[str]) -> str:
    """A pronounceable name no other planted memory uses."""
    while True:
        name = "".join(rng.choice(s) for s in ("bdgklmrstv", "aeiou", "lnrst", "aeio", "nrsvx")).capitalize()
        if name not in taken:
            taken.add(name)
            return name


def _planted(rng: random.Random, npc_ids: list[str], count: int) -> list[Planted]:
    taken: set[str] = set()
    memories = []
    for i in range(count):
        relation, obj = rng.choice(_RELATIONS), rng.choice(_OBJECTS)
        (past, verb), place = rng.choice(_HIDE_VERBS), rng.choice(_PLACES)
        name, town = _invented(rng, taken), _invented(rng, taken)
        memories.append(
            Planted(
                npc_id=npc_ids[i % len(npc_ids)],
                telling=f"Keep this between us: my {relation} {name} {past} the {obj} under the {place} in {town}.",
                question=f"Where did my {relation} {name} {verb} the {obj}?",
                answer=town,
            )
        )
    return memories


def _filler(rng: random.Random) -> str:
    return rng.choice(_FILLER).format(place=rng.choice(_PLACES), object=rng.choice(_OBJECTS), relation=rng.choice(_RELATIONS))


def _reply(turn: int, player_line: str) -> str:
    """The scripted model's output for an NPC's `turn`-th line: never the same words twice in
    a row, and a memory note in its own words every second turn."""
    # One sentence whose body cycles with a period longer than the gate's repeat window (8).
    opener, body = _OPENERS[(turn // len(_BODIES)) % len(_OPENERS)], _BODIES[turn % len(_BODIES)]
    dialogue = f"{opener} {body}. {_CLOSERS[(turn // 99) % len(_CLOSERS)]}"
    mutations = (
        [{"kind": "append_episodic", "text": f"The player told me: {player_line}"[:200], "significance": 0.4}] if turn % 2 else []
    )
    return json.dumps({"dialogue": dialogue, "emotion": "neutral", "mutations": mutations})


def _profiles(npcs: int) -> list[NpcProfile]:
    return [
        NpcProfile.model_validate(
            {
                "id": f"npc_{i:02d}",
                "name": f"Villager {i}",
                "persona": f"You are villager {i} of Eldmoor, a walled river town.",
                "canonical_facts": [{"id": "home", "text": "Eldmoor is a walled river town."}],
                "fallbacks": {"generic": ["Not now."]},
            }
        )
        for i in range(npcs)
    ]


def _rss_bytes() -> int:
    """The process's resident set now (not its peak)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _db_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())


def bench_soak(
    *,
    npcs: int = 50,
    interactions: int = 20_000,
    window: int = 1_000,
    planted: int = 60,
    seed: int = 7,
    policy: MemoryPolicy | None = None,
    keep_per_npc: int | None = 200,
    progress: Callable[[str], None] | None = None,
) -> dict[str, object]:
    """Run the long game; figures per window and at the end (see the module's docstring)."""
    from loreguard.schemas.audit import PackageSelection
    from loreguard.server.audit import AuditRecorder
    from loreguard.server.audit.replay import Replayer
    from loreguard.server.audit.retention import AuditRetention

    rng = random.Random(seed)
    profiles = _profiles(npcs)
    ids = [p.id for p in profiles]
    weights = [1.0 / (rank + 1) for rank in range(npcs)]
    memories = _planted(rng, ids, planted)
    # The planted memories are told during the first window, between other lines.
    plant_at = dict(zip(sorted(rng.sample(range(min(window, interactions)), len(memories))), memories, strict=True))
    schedule: list[tuple[str, str]] = []
    for i in range(interactions):
        memory = plant_at.get(i)
        schedule.append((memory.npc_id, memory.telling) if memory else (rng.choices(ids, weights)[0], _filler(rng)))
    turns: dict[str, int] = defaultdict(int)
    outputs: dict[str, list[str]] = defaultdict(list)
    for npc_id, line in schedule:
        outputs[npc_id].append(_reply(turns[npc_id], line))
        turns[npc_id] += 1

    figures: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "soak.sqlite"
        store = MemoryStore(path, policy=policy or MemoryPolicy())
        store.load_world(WorldDefinition(id="eldmoor", lore="A walled river town."))
        for profile in profiles:
            store.register_npc(profile)
        retention = (
            AuditRetention(keep_per_npc=keep_per_npc, every=window, archive=Path(tmp) / "archive") if keep_per_npc else None
        )
        recorder = AuditRecorder(store, fingerprint=None, retention=retention)
        # `cycle`: a long game must not keep every request (a scripted backend otherwise does, for
        # tests); each NPC's queue holds exactly its lines in order, so the rotation never shows.
        pipeline = GovernancePipeline(store, ScriptedBackend(outputs, cycle=True), recorder=recorder)
        first_seq = store.audit_rows(last=1)[0][0] + 1 if store.audit_rows(last=1) else 1
        lost = 0
        fallback_reasons: Counter[str] = Counter()
        p50s: list[float] = []
        for start in range(0, interactions, window):
            samples = []
            for npc_id, line in schedule[start : start + window]:
                ctx = InteractionContext(npc_id=npc_id, trigger_reason="player_utterance", player_input=line)
                began = time.perf_counter_ns()
                result = pipeline.interact(ctx)
                samples.append((time.perf_counter_ns() - began) / 1000)
                lost += result.audit_record_id is None
                if result.fallback_used:
                    failures = [f.rule_id or f.gate.value for a in result.receipt.attempts for f in a.failures]
                    why = str(result.receipt.fallback_reason).split(" -> ")[0][:60]
                    fallback_reasons[f"{why} ({', '.join(sorted(set(failures))) or 'no gate'})"] += 1
            samples.sort()
            n = start // window
            p50s.append(statistics.median(samples))
            figures[f"window_{n:02d}_p50_us"] = round(p50s[-1], 1)
            figures[f"window_{n:02d}_p99_us"] = round(percentile(samples, 0.99), 1)
            figures[f"window_{n:02d}_db_bytes"] = _db_bytes(path)
            figures[f"window_{n:02d}_rss_bytes"] = _rss_bytes()
            # What RSS and the file legitimately grow with: memory held (bounded per NPC).
            figures[f"window_{n:02d}_memory_entries"] = sum(len(store.scope(npc).episodic) for npc in ids)
            store.save("autosave")
            store.load("autosave")
            if progress is not None:
                progress(f"window {n}: p50 {p50s[-1]:.0f} us, db {_db_bytes(path) / 1e6:.1f} MB, rss {_rss_bytes() / 1e6:.0f} MB")

        records = store.audit_rows(last=1)[0][0] - first_seq + 1  # log positions taken (pruned or not)
        archive_bytes = sum(p.stat().st_size for p in (Path(tmp) / "archive").glob("*.lgp"))
        kept_records = len(store.audit_rows())
        last = min(window, interactions)
        package = recorder.export(PackageSelection(last=last), exported_by="bench soak")
        replayer = Replayer(package)
        started = time.perf_counter()
        exact = sum(replayer.replay_record(record).exact for record in package.records)
        replay_s = time.perf_counter() - started
        began = time.perf_counter_ns()
        before = store.save("final")
        save_ms = (time.perf_counter_ns() - began) / 1e6
        began = time.perf_counter_ns()
        after = store.load("final")
        load_ms = (time.perf_counter_ns() - began) / 1e6

        hits = 0
        for memory in memories:
            ctx = InteractionContext(npc_id=memory.npc_id, trigger_reason="player_utterance", player_input=memory.question)
            top = pipeline.recall(ctx)[:5]
            hits += any(memory.answer in scored.entry.text for scored in top)
        db_bytes = _db_bytes(path)
        store.close()

    figures.update(
        {
            "interactions": interactions,
            "npcs": npcs,
            "lost": lost + (interactions - records),
            "fallbacks": pipeline.counters["fallback"],
            "fallback_reasons": "; ".join(f"{n}x {why}" for why, n in fallback_reasons.most_common(3)) or "none",
            "last_vs_first_window_p50": round(p50s[-1] / p50s[0], 2),
            "db_bytes": db_bytes,
            "db_bytes_per_interaction": round(db_bytes / interactions),
            "audit_keep_per_npc": keep_per_npc or "all",
            "audit_records_kept": kept_records,
            "archive_bytes": archive_bytes,
            "replayed": len(package.records),
            "replay_exact": exact,
            "replay_ms_per_record": round(replay_s * 1000 / max(1, len(package.records)), 2),
            "save_ms": round(save_ms, 1),
            "load_ms": round(load_ms, 1),
            "load_same_hash": before == after,
            "planted": len(memories),
            "recall_at_5": round(hits / len(memories), 3),
        }
    )
    return figures
