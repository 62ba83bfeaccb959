"""The Godot debugger tab: the game-side forwarder and the editor panel, in headless Godot
against a real sidecar and a package exported from the recorded demo session."""

from __future__ import annotations

import io
import socket
import struct
import threading
from pathlib import Path

import pytest
from factories import say
from godot_helpers import require_godot, run_godot
from sidecar_helpers import running_sidecar

from loreguard.client import Client
from loreguard.schemas.audit import PackageSelection
from loreguard.server.audit.package import PackageFormat, decode_package, encode_package
from loreguard.server.cli import main
from loreguard.server.demo.run import run_demo
from loreguard.server.inference import ScriptedBackend

pytestmark = pytest.mark.slow


def _scene_package(data: Path) -> Path:
    """A debug package of a two-line scene with the player's words between the lines."""
    data.mkdir()
    backend = ScriptedBackend([say("The smith is late."), say("Never, Brom.")])
    with running_sidecar(data, backend) as sidecar, Client(sidecar.address) as client:
        client.scene_start("gate", ["guard", "merchant"], player_present=True)
        client.scene_next("gate")
        client.scene_say("gate", "Is he ever on time?", to="merchant")
        client.scene_next("gate")
        package = sidecar.recorder.export(PackageSelection(), exported_by="test")
    path = data / "scene.lgp"
    path.write_bytes(encode_package(package, PackageFormat.COMPRESSED))
    return path


def test_forwarder_and_panel(tmp_path: Path) -> None:
    require_godot()
    assert run_demo(tmp_path / "demo", out=io.StringIO()) == 0
    package = tmp_path / "session.lgp"
    assert main(["audit", "export", "--data", str(tmp_path / "demo"), "--out", str(package)]) == 0
    tampered = tmp_path / "tampered.lgp"
    data = bytearray(package.read_bytes())
    data[-20] ^= 0x01
    tampered.write_bytes(bytes(data))
    scene_package = _scene_package(tmp_path / "scene")
    (tmp_path / "live").mkdir()
    with running_sidecar(tmp_path / "live") as sidecar:
        result = run_godot(
            ["-s", "res://tests/test_debugger.gd"],
            timeout=120,
            env={
                "LOREGUARD_ADDRESS": sidecar.address,
                "LOREGUARD_TEST_OUT": str(tmp_path),
                "LOREGUARD_TEST_PACKAGE": str(package),
                "LOREGUARD_TEST_TAMPERED": str(tampered),
                "LOREGUARD_TEST_SCENE_PACKAGE": str(scene_package),
            },
        )
    output = result.stdout + result.stderr
    assert result.returncode == 0 and " 0 failed" in output, output
    # What the editor saved is a package the Python side verifies and replays.
    saved, _ = decode_package((tmp_path / "from-godot.json").read_bytes())
    assert [r.npc_id for r in saved.records] == ["guard", "merchant"]
    assert main(["replay", str(tmp_path / "from-godot.json")]) == 0


def test_a_debugged_game_forwards_records_through_engine_debugger(tmp_path: Path) -> None:
    """pytest listens where the editor's debugger would; the game connects with
    --remote-debug, and its forwarder's message crosses Godot's own debugger connection."""
    require_godot()
    received = bytearray()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(60)
        port = server.getsockname()[1]

        def collect() -> None:
            connection, _ = server.accept()
            with connection:
                connection.settimeout(60)
                while chunk := connection.recv(65536):
                    received.extend(chunk)

        collector = threading.Thread(target=collect, daemon=True)
        collector.start()
        (tmp_path / "live").mkdir()
        with running_sidecar(tmp_path / "live") as sidecar:
            result = run_godot(
                ["--remote-debug", f"tcp://127.0.0.1:{port}", "-s", "res://tests/debugged_game.gd"],
                timeout=120,
                env={"LOREGUARD_ADDRESS": sidecar.address},
            )
        collector.join(10)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # Godot frames each debugger message as a 4-byte length and an encoded Variant array; the
    # strings inside are plain UTF-8, so the record shows up in the bytes.
    messages = _frames(bytes(received))
    forwarded = [m for m in messages if b"loreguard:record" in m]
    assert len(forwarded) == 1, f"{len(messages)} debugger messages, none from Loreguard"
    assert b"Forward this, please." in forwarded[0] and b"guard" in forwarded[0]


def _frames(data: bytes) -> list[bytes]:
    frames, offset = [], 0
    while offset + 4 <= len(data):
        (size,) = struct.unpack_from("<I", data, offset)
        frames.append(data[offset + 4 : offset + 4 + size])
        offset += 4 + size
    return frames
