"""Scenes: NPCs talking to each other, and to the player, in one governed conversation.

`turns` chooses who speaks next (pure); `book` holds the scenes going on; `runner` speaks a
scene's next line through the governance pipeline and puts words said into the scene into the
memory of those present. See docs/scenes.md.
"""

from loreguard.server.scene.book import Scene, SceneBook, SceneProblem
from loreguard.server.scene.runner import SceneRunner

__all__ = ["Scene", "SceneBook", "SceneProblem", "SceneRunner"]
