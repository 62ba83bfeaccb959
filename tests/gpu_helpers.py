"""The GPU tests' device and model: Mesa's lavapipe (Vulkan on the CPU) and a two-layer model.

lavapipe runs every kernel of the real Vulkan backend, at about a second a token for the
embedded model's 30 layers on two cores: too slow for more than a few tokens. The engine's
device paths (offload, shared prefixes, spill, streaming, warm-up) do not depend on how many
layers there are, so most GPU tests run a model of the embedded one's tokenizer and chat
template with two small layers of random weights: a real GGUF that llama.cpp loads and runs
like any other, whose text is noise the grammar still shapes into the schema.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from pathlib import Path

import numpy as np


def vulkan_build() -> bool:
    """True when the installed llama-cpp-python has the Vulkan backend (read from its files,
    without loading it: the device list is fixed at the first load)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return False
    return any((Path(spec.origin).parent / "lib").glob("*ggml-vulkan*"))


#: Why the GPU tests cannot run in this session, or None (set by `expose_lavapipe`).
NO_GPU: str | None = "expose_lavapipe() was not called"


def expose_lavapipe() -> None:
    """Make lavapipe Vulkan device 0 for this test session, unless the developer chose a device
    (GGML_VK_VISIBLE_DEVICES). ggml skips CPU-type devices unless named, and reads the variable
    once, when the backend first loads: tests/conftest.py calls this before any test imports
    llama_cpp. Sets NO_GPU."""
    global NO_GPU
    icds = sorted(glob.glob("/usr/share/vulkan/icd.d/lvp_icd.*.json"))
    if not vulkan_build():
        NO_GPU = "llama-cpp-python was built without Vulkan (tools/build-llama-cpp.sh builds it)"
    elif "GGML_VK_VISIBLE_DEVICES" in os.environ:
        NO_GPU = None
    elif not icds:
        NO_GPU = "no lavapipe driver (Debian: mesa-vulkan-drivers)"
    else:
        # The loader then lists lavapipe alone, so index 0 is it whatever else is installed.
        os.environ["VK_DRIVER_FILES"] = os.environ["VK_ICD_FILENAMES"] = icds[0]
        os.environ["GGML_VK_VISIBLE_DEVICES"] = "0"
        NO_GPU = None


def require_gpu() -> None:
    """Skip a GPU test where this machine cannot run one; fail it where the Vulkan build was
    asked for (LOREGUARD_ACCELERATOR=vulkan, as CI asks), so a CI that could not build it
    does not pass by skipping."""
    import pytest

    if NO_GPU is None:
        return
    if os.environ.get("LOREGUARD_ACCELERATOR") == "vulkan":
        pytest.fail(f"LOREGUARD_ACCELERATOR=vulkan, but {NO_GPU}")
    pytest.skip(NO_GPU)


def write_small_model(tokenizer_gguf: Path, out: Path, *, hidden: int = 64, layers: int = 2, heads: int = 4) -> Path:
    """A Llama-architecture GGUF with `tokenizer_gguf`'s tokenizer and chat template and small
    random weights (seeded: the same file every time)."""
    import gguf

    source = gguf.GGUFReader(str(tokenizer_gguf))
    writer = gguf.GGUFWriter(str(out), "llama")
    vocab = 0
    for name, field in source.fields.items():
        if not name.startswith("tokenizer."):
            continue
        value_type = field.types[0]
        if value_type == gguf.GGUFValueType.ARRAY:
            values = field.contents()
            vocab = len(values) if name == "tokenizer.ggml.tokens" else vocab
            writer.add_array(name, values)
        else:
            writer.add_key_value(name, field.contents(), value_type)
    head_dim = hidden // heads
    writer.add_context_length(8192)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(hidden * 2)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    rng = np.random.default_rng(0)

    def weights(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.05).astype(np.float16)

    writer.add_tensor("token_embd.weight", weights(vocab, hidden))
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    writer.add_tensor("output.weight", weights(vocab, hidden))
    for i in range(layers):
        block = f"blk.{i}."
        writer.add_tensor(block + "attn_norm.weight", np.ones(hidden, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(block + name + ".weight", weights(hidden, hidden))
        writer.add_tensor(block + "ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        writer.add_tensor(block + "ffn_gate.weight", weights(hidden * 2, hidden))
        writer.add_tensor(block + "ffn_up.weight", weights(hidden * 2, hidden))
        writer.add_tensor(block + "ffn_down.weight", weights(hidden, hidden * 2))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
