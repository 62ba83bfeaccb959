"""The black box: records written with their batch, debug packages, replay and drift."""

from __future__ import annotations

import io
import json
import sqlite3
import threading
from pathlib import Path

import pytest
from factories import say
from model_helpers import demo_store
from sidecar_helpers import running_sidecar
from waiting import wait_for

from loreguard.client import Client, Internal, StorageUnavailable
from loreguard.memory import AuditWriteError, MemoryStore, canonical_json
from loreguard.schemas import InteractionContext
from loreguard.schemas.audit import PackageSelection
from loreguard.server.audit import AuditRecorder
from loreguard.server.audit.commands import attach
from loreguard.server.audit.manifests import chunk_names, entry_rows
from loreguard.server.audit.package import (
    MAGIC,
    PackageError,
    PackageFormat,
    PackageIntegrityError,
    decode_package,
    encode_package,
    package_document,
)
from loreguard.server.audit.replay import DriftKind, Replayer
from loreguard.server.cli import main
from loreguard.server.demo import demo_npcs
from loreguard.server.demo.run import run_demo
from loreguard.server.inference import ScriptedBackend
from loreguard.server.pipeline import GovernancePipeline


@pytest.fixture(scope="module")
def demo_session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scripted demo session, recorded by a real sidecar over ZeroMQ into a real SQLite file:
    six interactions with a retry (r2), a fallback (r3) and a repaired contradiction (r5)."""
    data = tmp_path_factory.mktemp("demo-session")
    assert run_demo(data, out=io.StringIO()) == 0
    return data


@pytest.fixture(scope="module")
def package_files(demo_session: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("packages")
    files = {"json": out / "session.json", "compressed": out / "session.lgp"}
    for path in files.values():
        assert main(["audit", "export", "--data", str(demo_session), "--out", str(path)]) == 0
    return files


def _records(data: Path):
    with MemoryStore(data / "memory.sqlite") as store:
        return AuditRecorder(store, fingerprint=None).records()


# --- recording ---------------------------------------------------------------------------------


def test_every_interaction_has_a_record_written_with_its_memory(demo_session: Path) -> None:
    records = _records(demo_session)
    assert [r.record_id for r in records] == [f"r{n}" for n in range(1, 7)]
    assert [r.receipt.outcome.value for r in records] == [
        "validated",
        "validated",
        "fallback",
        "validated",
        "validated",
        "validated",
    ]
    assert [len(r.receipt.attempts) for r in records] == [1, 2, 1, 1, 2, 1]
    retry = records[1]
    assert len(retry.prompts) == 2 and retry.prompts[0] != retry.prompts[1]
    assert [a.raw_output for a in retry.receipt.attempts][0].startswith('{"dialogue": "They say a dragon')
    # A record starts where the one before it in the log ended when both are the same NPC's.
    # Another NPC's writes in between move the store's one next sequence number, which every
    # memory hash covers (it names the entries the next write creates), so r6 does not start
    # where r3 ended: the merchant's r4 and r5 came between.
    # The game settles r4's sale (`set_state`: the purse and the lanterns left) before r5: the
    # world scope r5 reads is the one the game wrote, not the one r4 left.
    settled = records[3].intents[0].payment is not None
    for earlier, later in zip(records, records[1:], strict=False):
        if earlier.npc_id == later.npc_id:
            same = later.receipt.memory_hash_before == earlier.receipt.memory_hash_after
            assert same is not (settled and earlier is records[3])
    guard = [r for r in records if r.npc_id == "guard"]
    with MemoryStore(demo_session / "memory.sqlite") as store:
        assert store.memory_hash(("guard", "@world")) == guard[-1].receipt.memory_hash_after
        assert records[3].intents[0].type == "give_item"


def test_the_audit_log_is_append_only(demo_session: Path) -> None:
    db = sqlite3.connect(demo_session / "memory.sqlite")
    try:
        for statement in ("UPDATE audit SET record = '{}' WHERE seq = 1", "DELETE FROM audit", "DELETE FROM audit_blobs"):
            with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                db.execute(statement)
    finally:
        db.close()


def _fail_audit_writes(store: MemoryStore) -> None:
    # A TEMP trigger lives only on this connection: the audit insert fails the way a full disk
    # or an I/O error would, inside the interaction's transaction.
    store.db.execute("CREATE TEMP TRIGGER fail_audit BEFORE INSERT ON audit BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END")


def test_the_record_is_built_outside_any_write_transaction(tmp_path: Path) -> None:
    """Reply and record are made between plan and commit, so the SQLite write lock is held only
    for the rows themselves."""
    store = demo_store(tmp_path / "memory.sqlite")
    seen: list[bool] = []

    class Watching(AuditRecorder):
        def entry(self, seq: int, **parts: object):
            seen.append(store.db.in_transaction)
            return super().entry(seq, **parts)  # type: ignore[arg-type]

    pipeline = GovernancePipeline(store, ScriptedBackend([say("Aye.")], cycle=True), recorder=Watching(store, fingerprint=None))
    result = pipeline.interact(InteractionContext(npc_id="guard", trigger_reason="player_utterance", player_input="Hello."))
    assert seen == [False] and result.audit_record_id == "r1"


def test_no_state_change_without_a_record(tmp_path: Path) -> None:
    store = demo_store(tmp_path / "memory.sqlite")
    recorder = AuditRecorder(store, fingerprint=None)
    reply = say(
        "Gate closes at dusk.", mutations=[{"kind": "append_episodic", "text": "Asked about the gate.", "significance": 0.5}]
    )
    pipeline = GovernancePipeline(store, ScriptedBackend([reply], cycle=True), recorder=recorder)
    ask = InteractionContext(npc_id="guard", trigger_reason="player_utterance", player_input="When does the gate close?")
    first = pipeline.interact(ask)
    assert first.audit_record_id == "r1"
    before, image = store.memory_hash(), store.db.execute("SELECT count(*) FROM audit_blobs").fetchone()
    _fail_audit_writes(store)
    with pytest.raises(AuditWriteError, match="nothing was changed"):
        pipeline.interact(ask)
    assert store.memory_hash() == before and store.interactions("guard") == 1
    assert store.db.execute("SELECT count(*) FROM audit_blobs").fetchone() == image
    assert [r.seq for r in recorder.records()] == [1] and [r.seq for r in recorder.tail()] == [1]
    # A fresh store on the same file sees the same: the failed transaction left nothing behind.
    with MemoryStore(tmp_path / "memory.sqlite") as again:
        assert again.memory_hash() == before and again.interactions("guard") == 1
    store.db.execute("DROP TRIGGER fail_audit")
    assert pipeline.interact(ask).audit_record_id == "r2"


def test_a_full_disk_fails_the_interaction_with_a_typed_error(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        client.interact("guard", "Hello.")
        before = sidecar.store.memory_hash()
        # A real "database or disk is full": the file may not grow by a single page.
        (pages,) = sidecar.store.db.execute("PRAGMA page_count").fetchone()
        sidecar.store.db.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StorageUnavailable) as failure:
            client.interact("guard", "Tell me a long story. " * 80)
        assert failure.value.fault == "disk_full" and failure.value.reason == "the disk is full"
        assert "nothing was changed" in str(failure.value)
        assert sidecar.store.memory_hash() == before and client.memory("guard").interactions == 1
        assert client.stats().counters["interact.storage_unavailable"] == 1
        sidecar.store.db.execute("PRAGMA max_page_count = 1073741823")
        assert client.interact("guard", "Hello again.").audit_record_id == "r2"


def test_ring_buffer_keeps_the_newest_per_npc_and_tail_follows_a_cursor(tmp_path: Path) -> None:
    with running_sidecar(tmp_path, audit_ring_size=3) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        for n in range(5):
            client.interact("guard", f"line {n}")
        client.interact("merchant", "hello")
        tail = client.audit_tail(limit=50)
        assert [r.record_id for r in tail.records] == ["r3", "r4", "r5", "r6"] and tail.last_seq == 6
        assert [r.context.player_input for r in client.audit_tail(npc_id="guard").records] == ["line 2", "line 3", "line 4"]
        assert [r.seq for r in client.audit_tail(after=4, limit=1).records] == [5]
        assert client.audit_tail(after=6).records == ()
        # The log on disk keeps everything the ring forgot.
        assert len(sidecar.recorder.records()) == 6


@pytest.mark.parametrize("ring_size", [0, -1])
def test_an_audit_ring_that_could_hold_nothing_is_refused_at_start_up(tmp_path: Path, ring_size: int) -> None:
    from loreguard.server.sidecar.transport import Sidecar, SidecarConfig

    store = demo_store(tmp_path / "memory.sqlite")
    with pytest.raises(ValueError, match="audit ring size must be a whole number of at least 1"):
        AuditRecorder(store, fingerprint=None, ring_size=ring_size)
    with pytest.raises(ValueError, match=f"got {ring_size}"):
        Sidecar(store, ScriptedBackend([say("Aye.")]), SidecarConfig(port=0, audit_ring_size=ring_size))
    assert AuditRecorder(store, fingerprint=None, ring_size=1).ring_size == 1


def test_recording_is_deterministic_byte_for_byte(tmp_path: Path) -> None:
    """Two recordings of the same session agree on every decision byte (timings aside)."""
    decisions = []
    for run in ("a", "b"):
        assert run_demo(tmp_path / run, out=io.StringIO()) == 0
        decisions.append(b"\n".join(canonical_json(r.decision_fields()) for r in _records(tmp_path / run)))
    assert decisions[0] == decisions[1] and len(decisions[0]) > 10_000


# --- packages ----------------------------------------------------------------------------------


def test_json_and_compressed_round_trips_are_identical(package_files: dict[str, Path], capsys) -> None:
    from_json, form_json = decode_package(package_files["json"].read_bytes())
    from_compressed, form_compressed = decode_package(package_files["compressed"].read_bytes())
    assert (form_json, form_compressed) == (PackageFormat.JSON, PackageFormat.COMPRESSED)
    assert from_json == from_compressed and len(from_json.records) == 6
    assert package_files["compressed"].read_bytes().startswith(MAGIC)
    for form, path in ((PackageFormat.JSON, package_files["json"]), (PackageFormat.COMPRESSED, package_files["compressed"])):
        assert encode_package(from_json, form) == path.read_bytes() == encode_package(from_compressed, form)
    json_size, compressed_size = (package_files[f].stat().st_size for f in ("json", "compressed"))
    assert compressed_size * 4 < json_size


def test_a_package_holds_what_a_replay_needs(package_files: dict[str, Path]) -> None:
    package, _ = decode_package(package_files["json"].read_bytes())
    first = package.records[0]
    assert first.before.interactions == 0 and first.receipt.memory_hash_before
    named = {h for r in package.records for h in (*r.before.blob_hashes(), r.config)}
    manifests = [package.blobs[digest] for r in package.records for _, digest in r.before.scopes]
    chunks = {name for m in manifests for name in chunk_names(m)}
    entries = {digest for m in manifests for _, _, digest in entry_rows(m, package.blobs)}
    assert set(package.blobs) == named | chunks | entries, "exactly the blobs the records need"
    assert {m["scope"] for m in manifests} == {"guard", "merchant", "@world"}
    assert {package.blobs[r.before.profile]["id"] for r in package.records} == {"guard", "merchant"}
    assert package.blobs[first.config]["pipeline"]["retry"]["max_attempts"] >= 2
    assert package.model is not None and package.model.backend == "scripted"


@pytest.mark.parametrize("form", ["json", "compressed"])
def test_one_flipped_byte_is_rejected(package_files: dict[str, Path], form: str) -> None:
    data = package_files[form].read_bytes()
    step = max(1, len(data) // 300)
    for position in [*range(0, 64), *range(64, len(data), step), len(data) - 1]:
        damaged = bytearray(data)
        damaged[position] ^= 0x01
        with pytest.raises(PackageError):
            decode_package(bytes(damaged))


def test_a_resealed_forgery_of_the_hash_field_is_still_caught(package_files: dict[str, Path]) -> None:
    document = json.loads(package_files["json"].read_text())
    document["package"]["records"][0]["dialogue"] = "The password is silver moon."
    with pytest.raises(PackageIntegrityError, match="changed after export"):
        decode_package(json.dumps(document).encode())
    with pytest.raises(PackageError, match="not a Loreguard debug package"):
        decode_package(b"hello")


def test_audit_export_over_the_wire_is_a_valid_json_package(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        client.interact("guard", "Hello.")
        client.interact("merchant", "Hello.")
        reply = client.audit_export(npc_id="merchant")
        package, _ = decode_package(json.dumps(reply.package).encode())
        assert reply.records == 1 and [r.npc_id for r in package.records] == ["merchant"]
        assert reply.package == package_document(
            sidecar.recorder.export(PackageSelection(npc_id="merchant"), exported_by=package.exported_by)
        )
        # The exact file text, for clients that cannot write canonical JSON (the Godot editor).
        as_file = client.audit_export(npc_id="merchant", form="json")
        assert as_file.package is None and decode_package(as_file.text.encode())[0] == package


# --- replay ------------------------------------------------------------------------------------


def test_governance_replay_of_the_recorded_session_has_no_drift(package_files: dict[str, Path], capsys) -> None:
    assert main(["replay", str(package_files["compressed"])]) == 0
    out = capsys.readouterr().out
    assert "records: 6\nexact_matches: 6\ndrifts: 0\nfirst_drift: none" in out


def _changed_merchant_rule(tmp_path: Path) -> Path:
    """The designer adds "lantern" to the merchant's no-free-goods phrases."""
    merchant = next(p for p in demo_npcs() if p.id == "merchant")
    data = merchant.model_dump(mode="json")
    data["rules"][0]["checks"]["forbidden_phrases"].append("lantern")
    path = tmp_path / "merchant.json"
    path.write_text(json.dumps(data))
    return path


def test_a_changed_rule_drifts_validation_at_the_right_record(package_files: dict[str, Path], tmp_path: Path, capsys) -> None:
    profile = _changed_merchant_rule(tmp_path)
    assert main(["replay", str(package_files["json"]), "--profile", str(profile)]) == 1
    out = capsys.readouterr().out
    assert "exact_matches: 4\ndrifts: 2\nfirst_drift: r4 (merchant, interaction 0): constraints" in out
    assert "r4 merchant interaction 0: DRIFT constraints, prompt, validation, memory" in out
    assert 'replayed attempt 1 constraints: forbidden phrase "lantern"' in out

    package, _ = decode_package(package_files["json"].read_bytes())
    from loreguard.schemas import NpcProfile

    report = Replayer(package, profiles={"merchant": NpcProfile.model_validate_json(profile.read_text())}).run()
    kinds = {r.recorded.record_id: r.kinds for r in report.results}
    assert all(kinds[f"r{n}"] == () for n in (1, 2, 3)), "nothing drifts before the rule first applies"
    assert DriftKind.VALIDATION in kinds["r4"] and report.first_drift.recorded.record_id == "r4"
    assert DriftKind.VALIDATION not in kinds["r5"] and kinds["r6"] == ()
    stopped = Replayer(package, profiles={"merchant": NpcProfile.model_validate_json(profile.read_text())}).run(
        stop_on_drift=True
    )
    assert len(stopped.results) == 4 and stopped.stopped_early


def test_step_mode_shows_each_record_and_stops_on_request(package_files: dict[str, Path]) -> None:
    from loreguard.server.audit.commands import replay_package

    out, answers = io.StringIO(), iter(["", "q"])
    status = replay_package(package_files["json"], step=True, out=out, read=lambda prompt: next(answers))
    text = out.getvalue()
    assert status == 0 and "[1/6]" in text and "[2/6]" in text and "[3/6]" not in text
    assert "attempt  gate         recorded  replayed" in text and "records: 2" in text


def test_a_damaged_memory_image_is_a_failure_not_a_crash(package_files: dict[str, Path]) -> None:
    package, _ = decode_package(package_files["json"].read_bytes())
    digest = package.records[0].before.scopes[0][1]
    blobs = dict(package.blobs)
    last_chunk = chunk_names(blobs[digest])[-1]
    blobs[last_chunk] = {"entries": blobs[last_chunk]["entries"][:-1]}  # one memory lost
    report = Replayer(package.model_copy(update={"blobs": blobs})).run()
    assert report.results[0].kind is DriftKind.FAILURE
    assert "memory_hash_before" in report.results[0].details[0]


def test_replay_cli_rejects_a_tampered_file_clearly(package_files: dict[str, Path], tmp_path: Path, capsys) -> None:
    data = bytearray(package_files["compressed"].read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged = tmp_path / "damaged.lgp"
    damaged.write_bytes(bytes(data))
    assert main(["replay", str(damaged)]) == 2
    assert "cannot replay" in capsys.readouterr().err


# --- attach ------------------------------------------------------------------------------------


def test_attach_follows_a_running_sidecar(tmp_path: Path) -> None:
    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        client.interact("guard", "Before attach.")
        out = io.StringIO()
        follower = threading.Thread(target=lambda: attach(sidecar.address, count=3, backlog=1, interval_s=0.05, out=out))
        follower.start()
        # The backlog is read once, at attach: interactions made before it would fall into it.
        wait_for(lambda: len(out.getvalue().splitlines()) >= 2, "attach to show its backlog")
        client.interact("merchant", "After attach, one.")
        client.interact("guard", "After attach, two.")
        follower.join(60)
        assert not follower.is_alive()
        lines = out.getvalue().splitlines()
        assert lines[0].startswith("attached to loreguard")
        assert [line.split()[0] for line in lines[1:]] == ["r1", "r2", "r3"]
        assert "'After attach, two.'" in lines[3] and "validated" in lines[3]


def test_attach_ends_cleanly_when_the_sidecar_goes_away(tmp_path: Path) -> None:
    out, status = io.StringIO(), []
    with running_sidecar(tmp_path) as sidecar:
        follower = threading.Thread(target=lambda: status.append(attach(sidecar.address, interval_s=0.05, out=out)))
        follower.start()
        wait_for(lambda: out.getvalue().startswith("attached"), "attach to connect")
    follower.join(60)
    assert status == [1] and "went away" in out.getvalue().splitlines()[-1]


def test_audit_cli_on_a_missing_data_folder_says_so(tmp_path: Path, capsys) -> None:
    assert main(["audit", "export", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x.json")]) == 2
    assert "no Loreguard data" in capsys.readouterr().err


# --- the real model ----------------------------------------------------------------------------


@pytest.mark.model
def test_a_real_model_session_replays_exactly(tmp_path: Path, reproducible_backend) -> None:
    # Recorded on the reproducible engine, as `serve --reproducible` does; live replay always runs it.
    llama_backend = reproducible_backend
    store = demo_store(tmp_path / "memory.sqlite")
    recorder = AuditRecorder(store, fingerprint=llama_backend.fingerprint())
    pipeline = GovernancePipeline(store, llama_backend, recorder=recorder)
    for npc, line in (("guard", "Good evening. When does the gate close?"), ("merchant", "Do you sell lanterns?")):
        pipeline.interact(InteractionContext(npc_id=npc, trigger_reason="player_utterance", player_input=line, scene="eldmoor"))
    package = recorder.export(PackageSelection(), exported_by="test")
    governance = Replayer(package).run()
    assert (governance.exact_matches, governance.drifts) == (2, 0)
    live = Replayer(package, live_backend=llama_backend).run()
    assert live.model_matches and all(r.kind is not DriftKind.FAILURE for r in live.results)
    # Same model, same seeds, same prompts: llama.cpp on the CPU says the same again.
    assert live.exact_matches == 2, [r.details for r in live.results]


def test_a_halted_interaction_is_recorded_answered_with_a_typed_error_and_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loreguard.schemas import Authority, MemoryWrite, UpsertBelief
    from loreguard.server.pipeline import lifecycle

    real_plan_writes = lifecycle.plan_writes

    def plan_that_breaks_canon(approved, **kw):
        # A bug stand-in: an approved write aimed at the guard's canonical fact, which the
        # lifecycle's invariant refuses to apply.
        breach = UpsertBelief(scope=kw["npc_id"], belief_id="gate_hours", content="The gate never closes.", confidence=1.0)
        return [*real_plan_writes(approved, **kw), MemoryWrite(source=Authority.VALIDATED_OUTPUT, op=breach)]

    with running_sidecar(tmp_path) as sidecar, Client(sidecar.address, timeout_s=10) as client:
        client.interact("guard", "Hello.")
        before = sidecar.store.memory_hash()
        monkeypatch.setattr(lifecycle, "plan_writes", plan_that_breaks_canon)
        with pytest.raises(Internal) as halted:
            client.interact("guard", "Does the gate ever close?")
        details = halted.value.details
        assert (details["cause"], details["phase"], details["audit_record_id"]) == ("invariant_halt", "mutation", "r2")
        assert "gate_hours" in details["invariant"] and "nothing was applied" in str(halted.value)
        assert sidecar.store.memory_hash() == before and client.memory("guard").interactions == 1
        assert client.stats().counters["interact.halted"] == 1

        (record,) = client.audit_tail("guard", limit=1).records
        assert record.receipt.outcome.value == "halted" and record.receipt.halt_reason.startswith("mutation: ")
        assert record.receipt.memory_hash_after == record.receipt.memory_hash_before and record.dialogue == ""
        package = sidecar.recorder.export(PackageSelection(npc_id="guard", last=1), exported_by="test")

    # Replayed through the same (still broken) code, the halt is reproduced exactly.
    report = Replayer(package).run()
    assert (report.exact_matches, report.drifts) == (1, 0), [r.details for r in report.results]
    monkeypatch.setattr(lifecycle, "plan_writes", real_plan_writes)
    fixed = Replayer(package).run()  # with the bug gone, the record shows where behaviour changed
    assert fixed.drifts == 1 and fixed.results[-1].kind is DriftKind.VALIDATION


# --- streamed interactions ---------------------------------------------------------------------


def test_a_streamed_interaction_records_its_chunks_and_cut_and_replays_exactly(tmp_path: Path) -> None:
    from loreguard.server.audit.report import stream_lines
    from loreguard.server.pipeline.running.streaming import StreamSession

    store = demo_store(tmp_path / "memory.sqlite")
    recorder = AuditRecorder(store, fingerprint=None, ring_size=10)
    outputs = {"guard": [say("Halt there. The dragon was seen at dawn. Go home."), say("Well met. The gate shuts at dusk.")]}
    pipeline = GovernancePipeline(store, ScriptedBackend(outputs), recorder=recorder)
    context = InteractionContext(npc_id="guard", trigger_reason="player_utterance", player_input="News?")
    cut = pipeline.interact(context, stream=StreamSession(emit=lambda chunk: None))
    whole = pipeline.interact(context, stream=StreamSession(emit=lambda chunk: None))
    assert cut.dialogue == "Halt there." and whole.dialogue == "Well met. The gate shuts at dusk."
    records = recorder.records()
    lines = stream_lines(records[0])
    assert lines[0].startswith("stream attempt 1: #0 [0:11] at ") and lines[0].endswith("(generation stopped early)")
    assert "cut at dialogue character" in lines[1] and "dragon" in lines[1] and "11 characters released" in lines[1]
    assert stream_lines(records[1])[0].startswith("stream attempt 1: #0 [0:9]")
    package = recorder.export(PackageSelection(), exported_by="test")
    report = Replayer(package).run()
    assert report.exact_matches == 2 and report.drifts == 0
    # Replayed without streaming, the same outputs decide differently: the cut is a decision.
    plain = package.model_copy(
        update={
            "records": tuple(
                r.model_copy(
                    update={
                        "receipt": r.receipt.model_copy(
                            update={"attempts": tuple(a.model_copy(update={"stream": None}) for a in r.receipt.attempts)}
                        )
                    }
                )
                for r in package.records
            )
        }
    )
    assert Replayer(plain).run().drifts >= 1


def test_a_streamed_reply_continued_after_a_cut_replays_exactly(tmp_path: Path) -> None:
    """The retry after a cut went on from the released words: the record says so, the report
    shows it, and the replay (whose recorded outputs hold the given start) makes the same
    decisions."""
    from loreguard.server.audit.report import stream_lines
    from loreguard.server.pipeline.running.streaming import StreamSession, continuation_prefix

    store = demo_store(tmp_path / "memory.sqlite")
    recorder = AuditRecorder(store, fingerprint=None, ring_size=10)
    rest = say("Halt there. The gate shuts at dusk.")[len(continuation_prefix("Halt there.")) :]
    outputs = {"guard": [say("Halt there. The dragon was seen at dawn. Go home."), rest]}
    pipeline = GovernancePipeline(store, ScriptedBackend(outputs, continues=True), recorder=recorder)
    context = InteractionContext(npc_id="guard", trigger_reason="player_utterance", player_input="News?")
    result = pipeline.interact(context, stream=StreamSession(emit=lambda chunk: None))
    assert result.dialogue == "Halt there. The gate shuts at dusk." and result.attempts == 2
    (record,) = recorder.records()
    lines = stream_lines(record)
    assert "the next attempt continued the 11 characters released" in lines[1]
    assert lines[2].startswith("stream attempt 2 (continuing the 11 characters released): #1 [11:35]")
    report = Replayer(recorder.export(PackageSelection(), exported_by="test")).run()
    assert (report.exact_matches, report.drifts) == (1, 0), [r.details for r in report.results]


def test_a_retry_that_avoided_the_rejected_opening_replays_exactly(tmp_path: Path) -> None:
    """The first sentence failed before anything was out; the retry started afresh but was kept
    from opening with it (`avoided_start`, nothing continued). The recorded backend could steer
    its retries, so the replay steers them too and makes the same request."""
    from loreguard.server.pipeline.running.streaming import StreamSession

    store = demo_store(tmp_path / "memory.sqlite")
    recorder = AuditRecorder(store, fingerprint=None, ring_size=10)
    retry = 'Stay calm. Move along.", "emotion": "neutral", "mutations": []}'
    outputs = {"guard": [say("The dragon was seen at dawn. Run."), retry]}
    pipeline = GovernancePipeline(store, ScriptedBackend(outputs, continues=True), recorder=recorder)
    context = InteractionContext(npc_id="guard", trigger_reason="player_utterance", player_input="News?")
    result = pipeline.interact(context, stream=StreamSession(emit=lambda chunk: None))
    assert result.dialogue == "Stay calm. Move along." and result.attempts == 2
    second = result.receipt.attempts[1].stream
    assert second is not None and second.continued_chars == 0 and second.avoided_start == "The dragon was seen at dawn."
    report = Replayer(recorder.export(PackageSelection(), exported_by="test")).run()
    assert (report.exact_matches, report.drifts) == (1, 0), [r.details for r in report.results]


def test_a_continuation_the_time_budget_stopped_replays_its_decision(tmp_path: Path) -> None:
    """Words were out and a retry went on from them; it was cut too, and the retry budget was
    spent by then: the reply is the words released so far, and the replay (which runs at its own
    speed) ends there too instead of asking for an attempt the record does not have."""
    from loreguard.server.pipeline.running.streaming import StreamSession, continuation_prefix

    now = [0]

    class Slow(ScriptedBackend):
        def generate(self, request):  # type: ignore[no-untyped-def]
            if request.output_prefix:
                now[0] += 40 * 10**9  # 40 s of model time on the pipeline's clock: past the 30 s budget
            return super().generate(request)

    store = demo_store(tmp_path / "memory.sqlite")
    recorder = AuditRecorder(store, fingerprint=None, ring_size=10)
    went_on = say("Halt there. The gate is shut. The dragon sleeps.")[len(continuation_prefix("Halt there.")) :]
    outputs = {"guard": [say("Halt there. The dragon was seen at dawn. Go home."), went_on, "unused"]}
    pipeline = GovernancePipeline(store, Slow(outputs, continues=True), recorder=recorder, clock=lambda: now[0])
    context = InteractionContext(npc_id="guard", trigger_reason="player_utterance", player_input="News?")
    result = pipeline.interact(context, stream=StreamSession(emit=lambda chunk: None))
    assert result.dialogue == "Halt there. The gate is shut." and result.attempts == 2 and not result.fallback_used
    report = Replayer(recorder.export(PackageSelection(), exported_by="test")).run()
    assert (report.exact_matches, report.drifts) == (1, 0), [r.details for r in report.results]


def test_an_interaction_that_ran_out_of_time_replays_its_decision(tmp_path: Path) -> None:
    """The retry budget reads a clock, so a replay, which runs at its own speed, takes the
    record's word for when time ran out instead of timing itself again."""
    from loreguard.server.pipeline import PipelineConfig
    from loreguard.server.pipeline.retry import RetryPolicy

    store = demo_store(tmp_path / "memory.sqlite")
    recorder = AuditRecorder(store, fingerprint=None, ring_size=10)
    # The first answer (a second's work) breaks a rule; by then the half-second budget is spent,
    # so there is no retry.
    outputs = [say("The dragon was seen at dawn."), say("Well met.")]
    config = PipelineConfig(retry=RetryPolicy(time_budget_ms=500))
    pipeline = GovernancePipeline(store, ScriptedBackend(outputs, latency_s=1.0), config, recorder=recorder)
    result = pipeline.interact(InteractionContext(npc_id="guard", trigger_reason="player_utterance", player_input="News?"))
    assert result.fallback_used and result.receipt.fallback_reason.startswith("time_budget")
    assert len(result.receipt.attempts) == 1
    report = Replayer(recorder.export(PackageSelection(), exported_by="test")).run()
    assert (report.exact_matches, report.drifts) == (1, 0), [r.details for r in report.results]


def test_a_governance_replay_keeps_the_recorded_sampler_settings(tmp_path: Path) -> None:
    """A receipt names the sampler settings with the seed; the replay's stand-in model reports
    the recorded ones, so a record from a model with penalties on replays exactly."""

    class Penalised(ScriptedBackend):
        def sampling(self) -> dict[str, float | int]:
            return {"repeat_last_n": 64, "repeat_penalty": 1.1}

    store = demo_store(tmp_path / "memory.sqlite")
    recorder = AuditRecorder(store, fingerprint=None, ring_size=10)
    pipeline = GovernancePipeline(store, Penalised([say("Well met.")]), recorder=recorder)
    result = pipeline.interact(InteractionContext(npc_id="guard", trigger_reason="player_utterance", player_input="Hi."))
    assert result.receipt.sampling == {"repeat_last_n": 64, "repeat_penalty": 1.1}
    report = Replayer(recorder.export(PackageSelection(), exported_by="test")).run()
    assert (report.exact_matches, report.drifts) == (1, 0), [r.details for r in report.results]
