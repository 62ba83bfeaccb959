"""Every message except `interact`: quick store operations answered on the socket thread.

Each handler takes a validated body and returns a reply body, or raises `ProtocolError` with
the code PROTOCOL.md gives (`not_found`, `forbidden`). Refused writes change nothing: the store
applies a batch all or nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import version
from typing import Any

from pydantic import BaseModel

from loreguard.memory import MemoryStore
from loreguard.memory.errors import SlotConflictError, SlotCorruptError, SlotFormatError, SlotNotFoundError, UnknownScopeError
from loreguard.schemas.audit import PackageSelection
from loreguard.schemas.base import FrozenModel
from loreguard.schemas.memory import (
    GAME_SEED_KEY,
    RESERVED_STATE_PREFIX,
    WORLD_SCOPE,
    Authority,
    BatchResult,
    MemoryKind,
    MemoryWrite,
    RefusalCode,
    RemoveEntry,
    SetWorldState,
)
from loreguard.schemas.npc import NpcProfile, WorldDefinition
from loreguard.schemas.receipt import GateName, ModelFingerprint
from loreguard.schemas.scene import MAX_SCENE_NPCS, SceneIdRequest, SceneStartRequest, SceneState
from loreguard.schemas.wire import (
    MESSAGES,
    SUPPORTED_VERSIONS,
    AuditExportReply,
    AuditExportRequest,
    AuditTailReply,
    AuditTailRequest,
    Empty,
    ErrorCode,
    HelloReply,
    HelloRequest,
    Limits,
    MemoryGetReply,
    MemoryGetRequest,
    NpcRegisterReply,
    NpcStatusReply,
    NpcStatusRequest,
    NpcWarmReply,
    NpcWarmRequest,
    SetStateReply,
    SetStateRequest,
    SlotReply,
    SlotRequest,
    StatsReply,
    WorldLoadReply,
)
from loreguard.server.audit import AuditRecorder, NoRecordsError
from loreguard.server.audit.package import PackageFormat, encode_package, package_document
from loreguard.server.pipeline.expectancy import RuleIdCollision, rule_id_collisions, state_type_conflicts
from loreguard.server.pipeline.fallback import FallbackProblem, fallback_problems
from loreguard.server.scene import SceneBook, SceneProblem
from loreguard.server.sidecar.codec import ProtocolError
from loreguard.server.sidecar.stats import SidecarStats
from loreguard.server.sidecar.warmup import Warmer

#: Messages the socket loop queues for the inference workers instead of answering at once.
QUEUED = frozenset({"interact", "scene.next", "scene.say"})
#: Messages the socket loop answers itself: they name a request of the client that sent them.
BY_CLIENT = frozenset({"interact.cancel"})


def _refused(result: BatchResult, what: str) -> ProtocolError:
    unknown = any(r.code in (RefusalCode.UNKNOWN_SCOPE, RefusalCode.NOT_FOUND) for r in result.refusals)
    return ProtocolError(
        ErrorCode.NOT_FOUND if unknown else ErrorCode.FORBIDDEN,
        f"{what} refused; nothing was changed",
        details={"refusals": [r.model_dump(mode="json") for r in result.refusals]},
    )


def _rule_id_collisions(what: str, collisions: list[RuleIdCollision], *, world_side: bool) -> ProtocolError:
    """`invalid`, one error per colliding rule, its path in the request's body."""
    errors = []
    for c in collisions:
        world_rule = f"rule {c.rule_id!r} of world {c.world_id!r} (rules.{c.world_index})"
        npc_rule = f"rule {c.rule_id!r} of NPC {c.npc_id!r} (rules.{c.npc_index})"
        mine, theirs = (world_rule, npc_rule) if world_side else (npc_rule, world_rule)
        errors.append(
            {
                "path": f"rules.{c.world_index if world_side else c.npc_index}.id",
                "reason": f"{mine} has the id of {theirs}; a rule id must be unique across a world and its NPCs",
                "kind": "rule_id_collision",
                "world_rule": f"{c.world_id}:{c.rule_id}",
                "npc_rule": f"{c.npc_id}:{c.rule_id}",
            }
        )
    return ProtocolError(
        ErrorCode.INVALID, f"{what} refused; nothing was changed: a rule id collides", details={"errors": errors}
    )


def _fallback_problems(what: str, problems: list[FallbackProblem], world_id: str | None, *, world_side: bool) -> ProtocolError:
    """`invalid`, one error per fallback line and rule (or secret) it breaks. The path is the
    line's in the request's body; for a line of the other side (a world line that breaks the
    NPC's rule) it is the rule's or secret's; for a world line that breaks a world rule scoped
    to this NPC it is the line's as `world.fallbacks...`. `line` and `rule` name both in full."""
    mine = "world." if world_side else "npc."

    def named(path: str, npc_id: str | None, rest: str) -> str:
        return f"{(world_id or 'world') if path.startswith('world.') else npc_id}:{rest}"

    errors = []
    for p in problems:
        body_side = next((path for path in (p.line, p.broken) if path.startswith(mine)), None)
        kind = "secret" if p.failure.gate is GateName.KNOWLEDGE else "rule"
        line = named(p.line, p.npc_id, p.line.split(".", 1)[1])
        broken = named(p.broken, p.npc_id, p.failure.rule_id or "")
        error = {
            "path": body_side.removeprefix(mine) if body_side else p.line,
            "reason": f"fallback line {line} breaks {kind} {broken} ({p.broken.split('.', 1)[1]}), "
            f"which holds in every interaction: {p.failure.reason}",
            "kind": "fallback_breaks_rule",
            "line": line,
            "rule": broken,
        }
        if error not in errors:  # a world line against a world rule is found once per NPC
            errors.append(error)
    return ProtocolError(
        ErrorCode.INVALID,
        f"{what} refused; nothing was changed: a fallback line breaks a rule it stands in for",
        details={"errors": errors},
    )


class Dispatcher:
    def __init__(
        self,
        store: MemoryStore,
        *,
        fingerprint: ModelFingerprint | None,
        limits: Limits,
        stats: SidecarStats,
        recorder: AuditRecorder,
        launch_token: str | None = None,
        warmer: Warmer | None = None,
        scenes: SceneBook | None = None,
    ) -> None:
        self.store = store
        self.warmer = warmer
        self.scenes = scenes if scenes is not None else SceneBook()
        self.fingerprint = fingerprint
        self.stats = stats
        self.recorder = recorder
        self._hello = HelloReply(
            server=f"loreguard {version('loreguard')}",
            protocol_versions=SUPPORTED_VERSIONS,
            capabilities=tuple(sorted(MESSAGES)),
            model=fingerprint,
            limits=limits,
            launch_token=launch_token,
        )
        # The wire table names every message; each one but those the socket loop queues for the
        # inference workers (`QUEUED`) is answered here by the method `on_<type>`. A message
        # added to the table without its handler fails at start-up, not at the first request.
        self._handlers: dict[str, Callable[[Any], FrozenModel]] = {
            message_type: getattr(self, "on_" + message_type.replace(".", "_"))
            for message_type in MESSAGES
            if message_type not in QUEUED | BY_CLIENT
        }

    def handle(self, message_type: str, body: BaseModel) -> FrozenModel:
        return self._handlers[message_type](body)

    def require_npc(self, npc_id: str) -> None:
        try:
            self.store.profile(npc_id)
        except UnknownScopeError:
            raise ProtocolError(ErrorCode.NOT_FOUND, f"no NPC {npc_id!r} is registered", details={"npc_id": npc_id}) from None

    # --- handlers ----------------------------------------------------------------------------

    def on_hello(self, body: HelloRequest) -> HelloReply:
        if not set(body.versions) & set(SUPPORTED_VERSIONS):
            raise ProtocolError(
                ErrorCode.UNSUPPORTED_VERSION, "no protocol version in common", details={"supported": list(SUPPORTED_VERSIONS)}
            )
        return self._hello

    def on_world_load(self, body: WorldDefinition) -> WorldLoadReply:
        collisions = rule_id_collisions(body, (self.store.profile(npc_id) for npc_id in self.store.npc_ids()))
        if collisions:
            raise _rule_id_collisions("world.load", collisions, world_side=True)
        # Lines and rules of registered NPCs alone were checked when they registered.
        problems = [
            p
            for p in fallback_problems(body, [self.store.profile(npc_id) for npc_id in self.store.npc_ids()])
            if p.line.startswith("world.") or p.broken.startswith("world.")
        ]
        if problems:
            raise _fallback_problems("world.load", problems, body.id, world_side=True)
        result = self.store.load_world(body)
        if not result.committed:
            raise _refused(result, "world.load")
        memory = self.store.scope(WORLD_SCOPE)
        return WorldLoadReply(world_id=body.id, canonical_facts=len(memory.canonical), memory_hash=self.store.memory_hash())

    def on_npc_register(self, body: NpcProfile) -> NpcRegisterReply:
        collisions = rule_id_collisions(self.store.world(), (body,))
        if collisions:
            raise _rule_id_collisions("npc.register", collisions, world_side=False)
        world = self.store.world()
        problems = fallback_problems(world, [body])
        if problems:
            raise _fallback_problems("npc.register", problems, world.id if world else None, world_side=False)
        result = self.store.register_npc(body)
        if not result.committed:
            raise _refused(result, "npc.register")
        return NpcRegisterReply(
            npc_id=body.id,
            canonical_facts=len(self.store.scope(body.id).canonical),
            profile_hash=self.store.profile_hash(body.id),
            memory_hash=self.store.memory_hash(),
        )

    def on_npc_warm(self, body: NpcWarmRequest) -> NpcWarmReply:
        self.require_npc(body.npc_id)
        if self.warmer is None:
            return NpcWarmReply(npc_id=body.npc_id, pending=0)
        self.warmer.request(body.npc_id)
        return NpcWarmReply(npc_id=body.npc_id, pending=self.warmer.pending)

    def on_npc_status(self, body: NpcStatusRequest) -> NpcStatusReply:
        self.require_npc(body.npc_id)
        if self.warmer is None:
            return NpcStatusReply(npc_id=body.npc_id, ready=True, pending=0)
        return NpcStatusReply(npc_id=body.npc_id, ready=not self.warmer.waiting(body.npc_id), pending=self.warmer.pending)

    def on_world_set_state(self, body: SetStateRequest) -> SetStateReply:
        scope = body.npc_id or WORLD_SCOPE
        if body.npc_id is not None:
            self.require_npc(body.npc_id)
        self._check_reserved(body)
        self._check_state_types(body)
        writes = [
            MemoryWrite(source=Authority.GAME_SYSTEM, op=SetWorldState(scope=scope, key=key, value=value))
            for key, value in sorted(body.values.items())
        ] + [
            MemoryWrite(source=Authority.GAME_SYSTEM, op=RemoveEntry(scope=scope, kind=MemoryKind.WORLD_STATE, entry_id=key))
            for key in sorted(set(body.remove))
        ]
        result = self.store.apply(writes)
        if not result.committed:
            raise _refused(result, "world.set_state")
        return SetStateReply(applied=result.applied, memory_hash=self.store.memory_hash())

    @staticmethod
    def _check_reserved(body: SetStateRequest) -> None:
        """The sidecar's own keys: only the game's seed, a whole number from 0 to 2**32 - 1."""
        errors = [
            {"path": f"values.{key}", "reason": f"{RESERVED_STATE_PREFIX}* keys are the sidecar's own", "kind": "reserved"}
            for key in sorted(set(body.values) | set(body.remove))
            if key.startswith(RESERVED_STATE_PREFIX) and key != GAME_SEED_KEY
        ]
        seed = body.values.get(GAME_SEED_KEY)
        if GAME_SEED_KEY in body.values and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32):
            errors.append(
                {
                    "path": f"values.{GAME_SEED_KEY}",
                    "reason": "the game's seed is a whole number from 0 to 2**32 - 1",
                    "kind": "seed",
                }
            )
        if errors:
            raise ProtocolError(ErrorCode.INVALID, "world.set_state refused; nothing was changed", details={"errors": errors})

    def _check_state_types(self, body: SetStateRequest) -> None:
        """Refuse a value that a registered rule's condition would compare with a value of
        another type (`"yes"` where a rule expects `true`): the rule would silently never hold."""
        world = self.store.world()
        rules = list(world.rules if world else ())
        for npc_id in (body.npc_id,) if body.npc_id is not None else self.store.npc_ids():
            rules += self.store.profile(npc_id).rules
        conflicts = state_type_conflicts(rules, body.values)
        if conflicts:
            raise ProtocolError(
                ErrorCode.INVALID,
                "world.set_state refused; nothing was changed: a value has another type than the rule conditions compare it with",
                details={
                    "errors": [
                        {
                            "path": f"values.{c.key}",
                            "reason": f"rule {c.rule_id!r} compares it with {c.expected!r} ({type(c.expected).__name__}); got {c.value!r}",
                            "kind": "state_type",
                        }
                        for c in conflicts
                    ]
                },
            )

    def on_memory_get(self, body: MemoryGetRequest) -> MemoryGetReply:
        self.require_npc(body.npc_id)
        return MemoryGetReply(
            npc_id=body.npc_id,
            memory=self.store.scope(body.npc_id),
            world=self.store.scope(WORLD_SCOPE),
            interactions=self.store.interactions(body.npc_id),
            memory_hash=self.store.memory_hash((body.npc_id, WORLD_SCOPE)),
        )

    def on_save(self, body: SlotRequest) -> SlotReply:
        return SlotReply(slot=body.slot, memory_hash=self.store.slots.save(body.slot))

    def on_load(self, body: SlotRequest) -> SlotReply:
        try:
            return SlotReply(slot=body.slot, memory_hash=self.store.slots.load(body.slot))
        except SlotNotFoundError:
            raise ProtocolError(ErrorCode.NOT_FOUND, f"no save slot {body.slot!r}", details={"slot": body.slot}) from None
        except SlotConflictError as exc:
            # The designer's current data wins over a save; the game decides what to do.
            raise ProtocolError(
                ErrorCode.FORBIDDEN,
                f"save slot {body.slot!r} conflicts with the current designer data; nothing was loaded: {exc}",
                details={"slot": body.slot, "cause": "slot_conflict"},
            ) from None
        except SlotCorruptError as exc:
            raise ProtocolError(
                ErrorCode.INVALID, f"save slot {body.slot!r} is corrupt: {exc}", details={"slot": body.slot, "cause": "corrupt"}
            ) from None
        except SlotFormatError as exc:
            raise ProtocolError(ErrorCode.INVALID, str(exc), details={"slot": body.slot, "cause": "newer_format"}) from None

    def on_audit_tail(self, body: AuditTailRequest) -> AuditTailReply:
        if body.npc_id is not None:
            self.require_npc(body.npc_id)
        records = self.recorder.tail(npc_id=body.npc_id, after=body.after, limit=body.limit)
        return AuditTailReply(records=records, last_seq=self.recorder.last_seq)

    def on_audit_export(self, body: AuditExportRequest) -> AuditExportReply:
        if body.npc_id is not None:
            self.require_npc(body.npc_id)
        selection = PackageSelection(npc_id=body.npc_id, last=body.last, first_seq=body.first_seq, last_seq=body.last_seq)
        try:
            package = self.recorder.export(selection, exported_by=self._hello.server)
        except NoRecordsError as exc:
            raise ProtocolError(ErrorCode.NOT_FOUND, str(exc), details=selection.model_dump(exclude_none=True)) from None
        if body.form == "json":
            text = encode_package(package, PackageFormat.JSON).decode("utf-8")
            return AuditExportReply(text=text, records=len(package.records))
        return AuditExportReply(package=package_document(package), records=len(package.records))

    def on_scene_start(self, body: SceneStartRequest) -> SceneState:
        errors = []
        seen: set[str] = set()
        for field, ids in (("npcs", body.npcs), ("listeners", body.listeners)):
            for i, npc_id in enumerate(ids):
                if npc_id in seen:
                    errors.append({"path": f"{field}.{i}", "reason": f"{npc_id!r} is in the scene already"})
                seen.add(npc_id)
        errors += [
            {"path": f"weights.{npc_id}", "reason": f"{npc_id!r} is not one of the scene's speakers (npcs)"}
            for npc_id in sorted(body.weights)
            if npc_id not in body.npcs
        ]
        if len(body.npcs) + len(body.listeners) > MAX_SCENE_NPCS:
            errors.append(
                {"path": "listeners", "reason": f"a scene holds at most {MAX_SCENE_NPCS} NPCs, speakers and listeners together"}
            )
        if errors:
            raise ProtocolError(ErrorCode.INVALID, "scene.start refused; nothing was changed", details={"errors": errors})
        names = {}
        for field, ids in (("npcs", body.npcs), ("listeners", body.listeners)):
            for i, npc_id in enumerate(ids):
                try:
                    names[npc_id] = self.store.profile(npc_id).name
                except UnknownScopeError:
                    raise ProtocolError(
                        ErrorCode.NOT_FOUND, f"no NPC {npc_id!r} is registered ({field}.{i})",
                        details={"npc_id": npc_id, "path": f"{field}.{i}"},
                    ) from None  # fmt: skip
        return self._scene(lambda: self.scenes.start(body, names, self.store.next_seq))

    def on_scene_end(self, body: SceneIdRequest) -> SceneState:
        return self._scene(lambda: self.scenes.end(body.scene_id))

    def on_scene_get(self, body: SceneIdRequest) -> SceneState:
        return self._scene(lambda: self.scenes.get(body.scene_id, going_on=False).state())

    @staticmethod
    def _scene(work: Callable[[], SceneState]) -> SceneState:
        try:
            return work()
        except SceneProblem as problem:
            raise ProtocolError(ErrorCode(problem.code), problem.message, details=problem.details()) from None

    def on_stats(self, body: Empty) -> StatsReply:
        counters = self.stats.counters()
        counters.update({f"memory.{k}": v for k, v in sorted(self.store.counters.items())})
        if self.warmer is not None:
            counters["warm.pending"] = self.warmer.pending
        return StatsReply(counters=counters, latency_us=self.stats.latency_us())
