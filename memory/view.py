"""One consistent read of everything an interaction reads from the store."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from loreguard.memory.hashing import combine_scope_hashes, scopes_hash
from loreguard.memory.recall import RecallIndex
from loreguard.schemas.memory import ScopeMemory
from loreguard.schemas.npc import NpcProfile, WorldDefinition
from loreguard.schemas.rules import BehaviourStats


@dataclass(frozen=True)
class StoreView:
    """One consistent read of everything an interaction reads from the store, taken under the
    store's lock so no concurrent batch can fall between its parts."""

    profile: NpcProfile
    profile_hash: str
    world: WorldDefinition | None
    world_hash: str | None
    npc: ScopeMemory
    world_memory: ScopeMemory
    interactions: int
    #: The last fallback line the NPC spoke (None: none yet); its next fallback passes over it.
    last_fallback: str | None
    behaviour: dict[str, BehaviourStats]
    next_seq: int
    #: (scope, scope hash) for the NPC and the world, sorted by scope.
    scope_hashes: tuple[tuple[str, str], ...]
    #: Per scope: (kind, entry id) -> sha256 of the entry's canonical JSON (read-only).
    entry_digests: Mapping[str, Mapping[tuple[str, str], str]]
    #: The NPC's episodic memory indexed by keyword (read-only), for retrieval's relevance.
    recall: RecallIndex
    #: Other NPCs' scopes the interaction writes (those present in a scene, who hear its line),
    #: by scope; their hashes are in `scope_hashes` too.
    others: tuple[ScopeMemory, ...] = ()

    @property
    def memory_hash(self) -> str:
        return combine_scope_hashes(self.scope_hashes, next_seq=self.next_seq)

    @property
    def scopes_hash(self) -> str:
        """The NPC's and the world's contents alone (what governance reads), without the store's
        sequence counter, which another NPC's commit moves."""
        return scopes_hash(self.scope_hashes)
