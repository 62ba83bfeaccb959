"""A real sidecar in a process of its own, for tests that kill it mid-stream: the demo's world and
NPCs with a scripted model that streams its lines, except that a line asked for with "story" in
the player's words stops after its first sentence until the process is killed.

    python tests/paused_sidecar.py PORT DATA_DIR
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from factories import say
from stores import demo_store

from loreguard.server.inference import ScriptedBackend
from loreguard.server.inference.base import Generation, GenerationRequest, Observer
from loreguard.server.sidecar.transport import Sidecar, SidecarConfig

GUARD = "The gate closes at dusk. Travellers sleep at the inn. Mind the wolves, friend."
#: What the guard says next, in turn: a new line each time, as a model would (the gate fails an
#: NPC that gives one line to different questions: `repeats_itself`).
GUARD_AGAIN = "Again? Dusk, I said. The bell rings when it shuts."
GUARD_STORY = "Once a goat got stuck in this gate. We freed it at dawn, and it bit the captain."
MERCHANT = "Lanterns are five silver. Oil is extra!"


class PausingBackend(ScriptedBackend):
    def __init__(self) -> None:
        guard = [say(GUARD), say(GUARD_AGAIN), say(GUARD_STORY)]
        super().__init__({"guard": guard, "merchant": [say(MERCHANT, "happy")]}, cycle=True)
        self.never = threading.Event()

    def generate_streaming(self, request: GenerationRequest, observe: Observer) -> Generation:
        text = self.generate(request).text
        pause_at = text.index(". ") + 2 if "story" in request.prompt.player_turn else -1  # the player's line
        for end in range(1, len(text) + 1):
            if not observe(text[:end]):
                return Generation(text=text[:end], finish_reason="aborted")
            if end == pause_at:
                self.never.wait(300)  # the first sentence is out: hold until the test kills us
        return Generation(text=text)


def main() -> None:
    port, data = int(sys.argv[1]), Path(sys.argv[2])
    sidecar = Sidecar(demo_store(data / "memory.sqlite"), PausingBackend(), SidecarConfig(port=port))
    print(f"serving {sidecar.address}", flush=True)
    sidecar.serve_forever()


if __name__ == "__main__":
    main()
