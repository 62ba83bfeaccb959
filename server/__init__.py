"""The Loreguard sidecar: governance pipeline, inference backends, CLI."""

# llama.cpp's native libraries are loaded here, before anything in the sidecar can load libzmq
# (pyzmq). On a CUDA build, a process that had mapped libzmq first segfaulted or hung inside
# `llama_model_load_from_file` (issue 16: 5 of 5 orderings; llama.cpp first always loaded).
# Every sidecar entry point (`loreguard serve`, `demo`, `bench`, `replay`, a program embedding
# `Sidecar`) imports through this package, so the order holds everywhere; tests/test_load_order.py
# checks it in the dynamic linker's own list of loaded objects.
from loreguard.server.inference import llama_native as _llama_native  # noqa: F401
