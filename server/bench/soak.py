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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from loreguard.memory import MemoryPolicy, MemoryStore
from loreguard.schemas import InteractionContext, NpcProfile, WorldDefinition
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import GovernancePipeline
from loreguard.server.sidecar.stats import percentile

if TYPE_CHECKING:
    from loreguard.server.audit import AuditRecorder

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
    # One sentence whose body cycles with a period longer than the villagers' repeat window (8).
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
                # the scripted villagers have eleven lines: the soak measures memory, not variety
                "output_limits": {"repeat_window": 8},
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


def _schedule(
    rng: random.Random, ids: list[str], memories: list[Planted], interactions: int, window: int
) -> list[tuple[str, str]]:
    """Every (NPC, player line) of the game in order: the planted memories told during the
    first window, between small talk to NPCs drawn by Zipf weight."""
    weights = [1.0 / (rank + 1) for rank in range(len(ids))]
    plant_at = dict(zip(sorted(rng.sample(range(min(window, interactions)), len(memories))), memories, strict=True))
    schedule: list[tuple[str, str]] = []
    for i in range(interactions):
        memory = plant_at.get(i)
        schedule.append((memory.npc_id, memory.telling) if memory else (rng.choices(ids, weights)[0], _filler(rng)))
    return schedule


def _scripted_outputs(schedule: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Each NPC's model outputs, in the order the schedule asks for them."""
    turns: dict[str, int] = defaultdict(int)
    outputs: dict[str, list[str]] = defaultdict(list)
    for npc_id, line in schedule:
        outputs[npc_id].append(_reply(turns[npc_id], line))
        turns[npc_id] += 1
    return outputs


@dataclass
class _Log:
    """What the windows leave for the end."""

    #: Interactions that returned without an audit record.
    lost: int = 0
    fallback_reasons: Counter[str] = field(default_factory=Counter)
    #: Each window's median governance latency (us).
    p50s: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class _Ending:
    """What the end of the game measured."""

    #: Audit log positions the game took, pruned or not.
    records: int
    archive_bytes: int
    kept_records: int
    replayed: int
    replay_exact: int
    replay_s: float
    save_ms: float
    load_ms: float
    load_same_hash: bool
    recall_hits: int
    db_bytes: int


def _game(
    path: Path,
    archive: Path,
    profiles: list[NpcProfile],
    outputs: dict[str, list[str]],
    policy: MemoryPolicy,
    keep_per_npc: int | None,
    window: int,
) -> tuple[MemoryStore, AuditRecorder, GovernancePipeline]:
    """The store at `path`, the audit recorder moving all but `keep_per_npc` records per NPC to
    `archive` every `window` records, and the pipeline on the scripted model."""
    from loreguard.server.audit import AuditRecorder
    from loreguard.server.audit.retention import AuditRetention

    store = MemoryStore(path, policy=policy)
    store.load_world(WorldDefinition(id="eldmoor", lore="A walled river town."))
    for profile in profiles:
        store.register_npc(profile)
    retention = AuditRetention(keep_per_npc=keep_per_npc, every=window, archive=archive) if keep_per_npc else None
    recorder = AuditRecorder(store, fingerprint=None, retention=retention)
    # `cycle`: a long game must not keep every request (a scripted backend otherwise does, for
    # tests); each NPC's queue holds exactly its lines in order, so the rotation never shows.
    pipeline = GovernancePipeline(store, ScriptedBackend(outputs, cycle=True), recorder=recorder)
    return store, recorder, pipeline


def _play_window(pipeline: GovernancePipeline, lines: list[tuple[str, str]], log: _Log) -> list[float]:
    """Every line of one window through the pipeline; the governance latencies (us), sorted."""
    samples = []
    for npc_id, line in lines:
        ctx = InteractionContext(npc_id=npc_id, trigger_reason="player_utterance", player_input=line)
        began = time.perf_counter_ns()
        result = pipeline.interact(ctx)
        samples.append((time.perf_counter_ns() - began) / 1000)
        log.lost += result.audit_record_id is None
        if result.fallback_used:
            failures = [f.rule_id or f.gate.value for a in result.receipt.attempts for f in a.failures]
            why = str(result.receipt.fallback_reason).split(" -> ")[0][:60]
            log.fallback_reasons[f"{why} ({', '.join(sorted(set(failures))) or 'no gate'})"] += 1
    samples.sort()
    return samples


def _window_figures(n: int, samples: list[float], store: MemoryStore, path: Path, ids: list[str]) -> dict[str, object]:
    """Window `n`'s latencies (`samples`, sorted), and the file and process sizes after it."""
    return {
        f"window_{n:02d}_p50_us": round(statistics.median(samples), 1),
        f"window_{n:02d}_p99_us": round(percentile(samples, 0.99), 1),
        f"window_{n:02d}_db_bytes": _db_bytes(path),
        f"window_{n:02d}_rss_bytes": _rss_bytes(),
        # What RSS and the file legitimately grow with: memory held (bounded per NPC).
        f"window_{n:02d}_memory_entries": sum(len(store.scope(npc).episodic) for npc in ids),
    }


def _play(
    pipeline: GovernancePipeline,
    store: MemoryStore,
    path: Path,
    ids: list[str],
    schedule: list[tuple[str, str]],
    window: int,
    progress: Callable[[str], None] | None,
) -> tuple[dict[str, object], _Log]:
    """The game, window by window, saved and loaded after each as a player's game is; the
    windows' figures."""
    figures: dict[str, object] = {}
    log = _Log()
    for start in range(0, len(schedule), window):
        n = start // window
        samples = _play_window(pipeline, schedule[start : start + window], log)
        log.p50s.append(statistics.median(samples))
        figures |= _window_figures(n, samples, store, path, ids)
        store.slots.save("autosave")
        store.slots.load("autosave")
        if progress is not None:
            progress(f"window {n}: p50 {log.p50s[-1]:.0f} us, db {_db_bytes(path) / 1e6:.1f} MB, rss {_rss_bytes() / 1e6:.0f} MB")
    return figures, log


def _replay_last(recorder: AuditRecorder, last: int) -> tuple[int, int, float]:
    """The last `last` records exported and replayed: how many, how many exactly, in seconds."""
    from loreguard.schemas.audit import PackageSelection
    from loreguard.server.audit.replay import Replayer

    package = recorder.export(PackageSelection(last=last), exported_by="bench soak")
    replayer = Replayer(package)
    started = time.perf_counter()
    exact = sum(replayer.replay_record(record).exact for record in package.records)
    return len(package.records), exact, time.perf_counter() - started


def _save_and_load(store: MemoryStore) -> tuple[float, float, bool]:
    """A save and a load, in ms each, and whether the load gave back the saved state's hash."""
    began = time.perf_counter_ns()
    before = store.slots.save("final")
    save_ms = (time.perf_counter_ns() - began) / 1e6
    began = time.perf_counter_ns()
    after = store.slots.load("final")
    load_ms = (time.perf_counter_ns() - began) / 1e6
    return save_ms, load_ms, before == after


def _recall_hits(pipeline: GovernancePipeline, memories: list[Planted]) -> int:
    """Planted memories of which one of the five the prompt holds first names the hiding place."""
    hits = 0
    for memory in memories:
        ctx = InteractionContext(npc_id=memory.npc_id, trigger_reason="player_utterance", player_input=memory.question)
        top = pipeline.recall(ctx)[:5]
        hits += any(memory.answer in scored.entry.text for scored in top)
    return hits


def _end_of_game(
    store: MemoryStore,
    recorder: AuditRecorder,
    pipeline: GovernancePipeline,
    path: Path,
    archive: Path,
    first_seq: int,
    last: int,
    memories: list[Planted],
) -> _Ending:
    """The audit log's size, a replay of the last `last` records, a save and a load, then recall."""
    records = store.audit.rows(last=1)[0][0] - first_seq + 1
    archive_bytes = sum(p.stat().st_size for p in archive.glob("*.lgp"))
    kept_records = len(store.audit.rows())
    replayed, exact, replay_s = _replay_last(recorder, last)
    save_ms, load_ms, same_hash = _save_and_load(store)
    hits = _recall_hits(pipeline, memories)
    return _Ending(
        records=records,
        archive_bytes=archive_bytes,
        kept_records=kept_records,
        replayed=replayed,
        replay_exact=exact,
        replay_s=replay_s,
        save_ms=save_ms,
        load_ms=load_ms,
        load_same_hash=same_hash,
        recall_hits=hits,
        db_bytes=_db_bytes(path),
    )


def _summary_figures(
    interactions: int, npcs: int, keep_per_npc: int | None, fallbacks: int, log: _Log, end: _Ending, planted: int
) -> dict[str, object]:
    """The whole game's figures, after the windows'."""
    return {
        "interactions": interactions,
        "npcs": npcs,
        "lost": log.lost + (interactions - end.records),
        "fallbacks": fallbacks,
        "fallback_reasons": "; ".join(f"{n}x {why}" for why, n in log.fallback_reasons.most_common(3)) or "none",
        "last_vs_first_window_p50": round(log.p50s[-1] / log.p50s[0], 2),
        "db_bytes": end.db_bytes,
        "db_bytes_per_interaction": round(end.db_bytes / interactions),
        "audit_keep_per_npc": keep_per_npc or "all",
        "audit_records_kept": end.kept_records,
        "archive_bytes": end.archive_bytes,
        "replayed": end.replayed,
        "replay_exact": end.replay_exact,
        "replay_ms_per_record": round(end.replay_s * 1000 / max(1, end.replayed), 2),
        "save_ms": round(end.save_ms, 1),
        "load_ms": round(end.load_ms, 1),
        "load_same_hash": end.load_same_hash,
        "planted": planted,
        "recall_at_5": round(end.recall_hits / planted, 3),
    }


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
    rng = random.Random(seed)
    profiles = _profiles(npcs)
    ids = [p.id for p in profiles]
    memories = _planted(rng, ids, planted)
    schedule = _schedule(rng, ids, memories, interactions, window)
    with tempfile.TemporaryDirectory() as tmp:
        path, archive = Path(tmp) / "soak.sqlite", Path(tmp) / "archive"
        outputs = _scripted_outputs(schedule)
        store, recorder, pipeline = _game(path, archive, profiles, outputs, policy or MemoryPolicy(), keep_per_npc, window)
        rows = store.audit.rows(last=1)
        first_seq = rows[0][0] + 1 if rows else 1
        figures, log = _play(pipeline, store, path, ids, schedule, window, progress)
        end = _end_of_game(store, recorder, pipeline, path, archive, first_seq, min(window, interactions), memories)
        store.close()
    return figures | _summary_figures(interactions, npcs, keep_per_npc, pipeline.counters["fallback"], log, end, len(memories))
