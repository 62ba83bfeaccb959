"""llama.cpp's native libraries load before libzmq in every sidecar entry point.

On a CUDA build, a process that had mapped libzmq (pyzmq) before llama.cpp's libraries crashed
loading the model (issue 16). `loreguard.server` loads llama.cpp first; this test reads the
dynamic linker's own list of loaded objects, in load order, in a fresh interpreter per entry
point, so it fails on a CPU machine as soon as any path would load libzmq first.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_LOADED_IN_ORDER = r"""
import ctypes, json, sys
for name in sys.argv[1:]:
    __import__(name)

class _Info(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_void_p), ("name", ctypes.c_char_p)]

names = []
_Callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_Info), ctypes.c_size_t, ctypes.c_void_p)

def _visit(info, size, data):
    names.append((info.contents.name or b"").decode())
    return 0

ctypes.CDLL(None).dl_iterate_phdr(_Callback(_visit), None)
print(json.dumps(names))
"""

#: Every way into the sidecar that loads pyzmq.
ENTRY_POINTS = [
    ["loreguard.server.sidecar.transport"],
    ["loreguard.server.sidecar.serve"],
    ["loreguard.server.demo.run"],
    ["loreguard.server.bench.sidecar"],
    # The CLI, then any subcommand that talks to a sidecar (attach) through the client.
    ["loreguard.server.cli", "loreguard.client"],
    # A program that embeds the sidecar and also uses the Python client, server first.
    ["loreguard.server", "loreguard.client"],
]


def _first_index(names: list[str], marker: str) -> int:
    hits = [i for i, name in enumerate(names) if marker in name.rsplit("/", 1)[-1]]
    assert hits, f"{marker} is not loaded at all: {names}"
    return hits[0]


@pytest.mark.parametrize("modules", ENTRY_POINTS, ids=lambda m: "+".join(m))
def test_llama_cpp_is_loaded_before_libzmq(modules: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", _LOADED_IN_ORDER, *modules], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    names = json.loads(done.stdout)
    assert _first_index(names, "libllama") < _first_index(names, "libzmq"), names
