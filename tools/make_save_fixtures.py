"""Write the save-file fixtures of tests/memory/saves with the code of earlier commits.

Each fixture is a memory file (SQLite) that an earlier Loreguard wrote, holding one save slot,
`chapter1`, and memory written after it; next to it, a JSON file with what the slot held. The
tests open each file with today's code, load the slot and compare. Run from the repository
root (it needs git); the fixtures are committed, so this runs only when a format changes:

    python tools/make_save_fixtures.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "memory" / "saves"

#: (fixture name, commit whose code writes it): every slot and schema format there has been.
FIXTURES = (
    ("schema1-slot1", "de45057^", False),  # before the audit log: schema 1, slot format 1
    ("schema2-slot1", "fbafe75^", False),  # the audit log in the file: schema 2, slot format 1
    ("schema2-slot2", "00963fa", True),  # the memory hash covers next_seq: schema 2, slot format 2, records
    ("schema3-slot2", "2745e45", True),  # audit retention, before the last fallback line: schema 3, slot format 2
)

# Runs inside the old code: only the API every version had.
_WRITER = r"""
import json, sys
from loreguard.memory import MemoryStore
from loreguard.schemas import AppendEpisodic, Authority, MemoryWrite, NpcProfile, SetWorldState, UpsertBelief, WorldDefinition

path, expected, RECORD = sys.argv[1], sys.argv[2], sys.argv[3] == "record"
store = MemoryStore(path)
store.load_world(WorldDefinition(id="eldmoor", lore="A walled river town.", initial_state={"gate": "open"}))
store.register_npc(NpcProfile.model_validate({
    "id": "guard", "name": "Brannoc", "persona": "A guard at the north gate.",
    "canonical_facts": [{"id": "gate", "text": "The north gate closes at dusk."}],
}))

def w(op, source=Authority.VALIDATED_OUTPUT):
    return MemoryWrite(source=source, op=op)

for i, text in enumerate(["The player paid the toll.", "The player asked about the mill.", "The player's sister Kalix hid a compass."]):
    assert store.apply([w(AppendEpisodic(scope="guard", text=text, significance=0.3 + i / 10, at_interaction=i))], complete_interaction="guard").committed
assert store.apply([w(UpsertBelief(scope="guard", belief_id="player_honest", content="The player pays the toll.", confidence=0.7))]).committed
assert store.apply([w(SetWorldState(scope="@world", key="gate", value="closed"), Authority.GAME_SYSTEM)]).committed
saved = getattr(store, "slots", store).save("chapter1")  # store.slots.save since the store was split
guard, world = store.scope("guard"), store.scope("@world")
state = {
    "memory_hash": saved,
    "next_seq": getattr(store, "next_seq", None) or store._next_seq,
    "interactions": store.interactions("guard"),
    "episodic": [e.text for e in guard.episodic],
    "beliefs": [[b.id, b.content] for b in guard.beliefs],
    "world_state": [[s.key, s.value] for s in world.world_state],
}
# Memory after the save, which a load must undo.
assert store.apply([w(AppendEpisodic(scope="guard", text="The player broke the gate.", significance=0.9, at_interaction=3))], complete_interaction="guard").committed
if RECORD:  # a few recorded interactions, so the file holds an audit log of its version
    from loreguard.schemas import InteractionContext
    from loreguard.server.audit import AuditRecorder
    from loreguard.server.pipeline import GovernancePipeline
    from loreguard.server.inference import ScriptedBackend
    lines = [json.dumps({"dialogue": f"Aye, {w} is quiet tonight.", "emotion": "neutral", "mutations": []}) for w in ("the gate", "the road", "the mill")]
    pipeline = GovernancePipeline(store, ScriptedBackend(lines), recorder=AuditRecorder(store, fingerprint=None))
    for line in ("Good evening.", "Any news?", "What of the mill?"):
        assert pipeline.interact(InteractionContext(npc_id="guard", trigger_reason="player_utterance", player_input=line)).audit_record_id
store.close()
json.dump(state, open(expected, "w"), indent=1, sort_keys=True)
"""


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, commit, record in FIXTURES:
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp) / "tree"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit], check=True)
            try:
                namespace = Path(tmp) / "ns" / "loreguard"
                namespace.mkdir(parents=True)
                for part in ("schemas", "memory", "server"):
                    (namespace / part).symlink_to(tree / part)
                db = OUT / f"{name}.sqlite"
                db.unlink(missing_ok=True)
                env = {"PYTHONPATH": str(namespace.parent), "PATH": "/usr/bin:/bin"}
                subprocess.run(
                    [sys.executable, "-c", _WRITER, str(db), str(OUT / f"{name}.json"), "record" if record else "no"],
                    check=True,
                    env=env,
                    cwd=tmp,
                )
                # One file: fold the write-ahead log in, as a game copying its save would find it.
                subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        f"import sqlite3; sqlite3.connect({str(db)!r}).execute('PRAGMA wal_checkpoint(TRUNCATE)')",
                    ],
                    check=True,
                )
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
        print(f"{name}: {json.loads((OUT / f'{name}.json').read_text())['memory_hash'][:12]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
