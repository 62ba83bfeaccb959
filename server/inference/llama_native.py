"""The edge to llama.cpp: a thin, typed wrapper over llama-cpp-python's C bindings.

We use the C API rather than the high-level `llama_cpp.Llama` object because the backend needs
three things that object hides: exact control of the KV cache (clear, save and restore one
sequence), a canonical evaluation order (prefix, then suffix, in fixed batches), and the logits
of a whole batch as one array, which the host-side sampler (`sampling.py`) reads in one pass.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys
import time
from collections.abc import Callable

# The OpenMP runtime reads this once, when llama.cpp first starts its thread pool. A sidecar next
# to a running game must sleep between tasks rather than spin on the cores the game needs.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import llama_cpp
import numpy as np

# llama.cpp logs model loading in detail; keep errors only unless the user asks otherwise.
logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)

#: ggml's log levels (ggml.h). llama-cpp-python's own callback predates DEBUG, so it shows every
#: warning as an error; this one shows warnings and errors and nothing below.
_LOG_WARN, _LOG_CONT = 3, 5
#: The warning a unified KV cache always draws: llama.cpp compares the whole pool, which every
#: sequence shares, with the trained context. No sequence may use more than `n_ctx` of the
#: backend's config, which the backend checks against the trained context itself.
_POOL_OVERFLOW = b"possible training context overflow"
#: What llama.cpp says, once per such token, of a model file that types a control token's text
#: ("</s>") as ordinary: "this is probably a bug in the model". Catalogue models do this; llama.cpp
#: treats the token as a control token all the same, and the gate refuses one in a reply.
_CONTROL_LOOKING = b"control-looking token"
CONTROL_LOOKING_NOTE = (
    "loreguard: the model file types some control tokens (such as '</s>') as ordinary text; llama.cpp "
    "treats them as control tokens, and a reply holding one is refused, so this is harmless\n"
)
_log_state = {"level": 0, "pooled": False, "control_noted": False}


def shown_log(level: int, text: bytes) -> str | None:
    """What of a llama.cpp log line reaches stderr: warnings and errors, in our words where
    llama.cpp's would alarm a player's log for nothing; None: nothing."""
    if level == _LOG_CONT:
        level = _log_state["level"]
    _log_state["level"] = level
    if level < _LOG_WARN or (_log_state["pooled"] and _POOL_OVERFLOW in text):
        return None
    if _CONTROL_LOOKING in text:
        noted, _log_state["control_noted"] = _log_state["control_noted"], True
        return None if noted else CONTROL_LOOKING_NOTE
    return text.decode("utf-8", "replace")


@llama_cpp.llama_log_callback
def _llama_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    shown = shown_log(level, text)
    if shown is not None:
        sys.stderr.write(shown)
        sys.stderr.flush()


llama_cpp.llama_log_set(_llama_log, ctypes.c_void_p(0))  # module-level: the C side keeps only a pointer

_backend_ready = False


def _ensure_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        llama_cpp.llama_backend_init()
        _backend_ready = True


class NativeError(RuntimeError):
    """llama.cpp reported a failure."""


def supports_gpu_offload() -> bool:
    """True when llama-cpp-python was built with a GPU backend (CUDA, Metal, Vulkan...)."""
    return bool(llama_cpp.llama_supports_gpu_offload())


class NativeModel:
    """Weights and vocabulary of one GGUF file."""

    def __init__(self, path: str, *, n_gpu_layers: int = 0, devices: ctypes.Array[ctypes.c_void_p] | None = None) -> None:
        """`devices`: the NULL-terminated list llama.cpp may offload to (None: every GPU it
        finds; an empty list: none, the CPU alone)."""
        _ensure_backend()
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        if devices is not None:
            params.devices = ctypes.cast(devices, ctypes.c_void_p)
        model = llama_cpp.llama_model_load_from_file(path.encode(), params)
        if not model:
            raise NativeError(f"llama.cpp could not load the model file {path!r}")
        self._model = model
        self.vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.n_layer = llama_cpp.llama_model_n_layer(model)
        self.n_ctx_train = llama_cpp.llama_model_n_ctx_train(model)
        self.n_embd = llama_cpp.llama_model_n_embd(model)
        self.n_head = llama_cpp.llama_model_n_head(model)
        self.n_head_kv = llama_cpp.llama_model_n_head_kv(model)
        self._pieces: dict[int, bytes] = {}
        #: Tokens that end a generation besides the vocabulary's own end-of-generation tokens
        #: (a model's per-model stop tokens, see loreguard.server.models).
        self.stop_tokens: frozenset[int] = frozenset()

    @property
    def handle(self) -> llama_cpp.llama_model_p:
        return self._model

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of f16 K and V cache one token takes in every layer (llama.cpp's default cache type)."""
        head_dim = self.n_embd // max(1, self.n_head)
        return 2 * self.n_layer * self.n_head_kv * head_dim * 2

    def metadata(self) -> dict[str, str]:
        out: dict[str, str] = {}
        buf = ctypes.create_string_buffer(1 << 16)
        for i in range(llama_cpp.llama_model_meta_count(self._model)):
            n = llama_cpp.llama_model_meta_key_by_index(self._model, i, buf, len(buf))
            key = buf.value[: max(n, 0)].decode("utf-8", "replace")
            n = llama_cpp.llama_model_meta_val_str_by_index(self._model, i, buf, len(buf))
            out[key] = buf.value[: max(n, 0)].decode("utf-8", "replace")
        return out

    def description(self) -> str:
        buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_model_desc(self._model, buf, len(buf))
        return buf.value[: max(n, 0)].decode("utf-8", "replace")

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        """Tokens of `text`; special-token markup (e.g. `<|im_start|>`) is parsed as such."""
        data = text.encode("utf-8")
        capacity = len(data) + 8
        tokens = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), tokens, capacity, add_special, True)
        if n < 0:
            raise NativeError("tokenization overflowed its buffer")
        return list(tokens[:n])

    def piece(self, token: int) -> bytes:
        cached = self._pieces.get(token)
        if cached is None:
            buf = ctypes.create_string_buffer(256)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
            cached = buf.raw[: max(n, 0)]
            self._pieces[token] = cached
        return cached

    def is_end_of_generation(self, token: int) -> bool:
        return token in self.stop_tokens or bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    def special_token_texts(self) -> tuple[str, ...]:
        """The text of every control token of the vocabulary (`<|im_start|>`, `<|endoftext|>`,
        `<start_of_turn>`, whatever this model's family uses), as the tokenizer itself marks them;
        sorted, so the gate's order never depends on the vocabulary's."""
        texts = set()
        for token in range(self.n_vocab):
            if llama_cpp.llama_vocab_get_attr(self.vocab, token) & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL:
                text = self.token_text(token)
                if text.strip():
                    texts.add(text)
        return tuple(sorted(texts))

    def token_text(self, token: int) -> str:
        return (llama_cpp.llama_vocab_get_text(self.vocab, token) or b"").decode("utf-8", "replace")

    @property
    def bos_token(self) -> int:
        return llama_cpp.llama_vocab_bos(self.vocab)

    @property
    def eos_token(self) -> int:
        return llama_cpp.llama_vocab_eos(self.vocab)

    @property
    def adds_bos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))

    def close(self) -> None:
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None


#: llama.cpp's own limit on sequences in one context (LLAMA_MAX_SEQ).
MAX_SEQUENCES = 256


_log = logging.getLogger(__name__)

#: ggml's names of the KV cache types llama.cpp takes (`type_k`, `type_v`).
_GGML_TYPES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 30: "bf16"}


@functools.lru_cache(maxsize=64)
def _float_array(n: int) -> type[ctypes.Array[ctypes.c_float]]:
    return ctypes.c_float * n


def _floats(address: int, n: int) -> np.ndarray:
    """A float32 view of `n` floats of native memory at `address` (no copy)."""
    return np.frombuffer(memoryview(_float_array(n).from_address(address)).cast("B"), dtype=np.float32)


def sequence_limit(n_ctx: int, context: NativeContext) -> int:
    """The most tokens one sequence may hold: `n_ctx`, within the context. Says so in the log
    (each time a backend loads) when that is more than the model was trained on (llama.cpp's own
    warning compares the unified pool instead, which no sequence ever fills alone)."""
    trained = context.model.n_ctx_train
    if 0 < trained < n_ctx:
        _log.warning(
            "n_ctx=%d is more than the %d tokens this model was trained on: a conversation that long may lose "
            "coherence; lower n_ctx to %d",
            n_ctx, trained, trained,
        )  # fmt: skip
    return min(n_ctx, context.n_ctx)


class NativeContext:
    """One KV cache and the batch used to fill it.

    With `n_seq_max` > 1 the cache is unified: every sequence draws cells from one pool of
    `n_ctx`, and cells copied between sequences (`seq_cp`) are shared, not duplicated. The solo
    path (`evaluate`, `save_sequence`, `restore_sequence`) uses sequence 0.
    """

    def __init__(self, model: NativeModel, *, n_ctx: int, n_batch: int, n_threads: int, n_seq_max: int = 1) -> None:
        if not 1 <= n_seq_max <= MAX_SEQUENCES:
            raise NativeError(f"n_seq_max={n_seq_max}: llama.cpp takes 1 to {MAX_SEQUENCES} sequences")
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = n_seq_max
        params.kv_unified = n_seq_max > 1
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.no_perf = True
        _log_state["pooled"] = params.kv_unified
        ctx = llama_cpp.llama_init_from_model(model.handle, params)
        if not ctx:
            raise NativeError(
                f"llama.cpp could not create a context of {n_ctx} tokens for {n_seq_max} sequences "
                f"(about {n_ctx * model.kv_bytes_per_token / 2**20:.0f} MiB of KV cache): lower the KV budget or the slots"
            )
        self.n_seq_max = n_seq_max
        #: What shapes the bytes of a saved KV state (prompt_states.StateMaker.kv_layout).
        self.kv_layout = (
            f"k={_GGML_TYPES.get(params.type_k, params.type_k)} v={_GGML_TYPES.get(params.type_v, params.type_v)} "
            f"fa={getattr(params, 'flash_attn_type', 'default')}"
        )
        self._ctx = ctx
        self.model = model
        self.n_ctx = llama_cpp.llama_n_ctx(ctx)
        self.n_batch = n_batch
        self._memory = llama_cpp.llama_get_memory(ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        #: Tokens now in the KV cache, in position order.
        self.n_past = 0
        #: When the `llama_decode` now running started (time.monotonic()), or None: a watchdog
        #: reads it from another thread to tell a GPU driver that stopped answering (stalled_s).
        self.decoding_since: float | None = None

    def _decode(self, batch: llama_cpp.llama_batch) -> int:
        self.decoding_since = time.monotonic()
        try:
            return int(llama_cpp.llama_decode(self._ctx, batch))
        finally:
            self.decoding_since = None

    def stalled_s(self) -> float:
        """Seconds the running `llama_decode` has taken so far; 0.0 when none is running."""
        since = self.decoding_since
        return 0.0 if since is None else time.monotonic() - since

    @property
    def handle(self) -> llama_cpp.llama_context_p:
        return self._ctx

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self._memory, True)
        self.n_past = 0

    def evaluate(self, tokens: list[int], *, proceed: Callable[[], bool] | None = None) -> bool:
        """Append `tokens` to the cache in fixed `n_batch` chunks; logits only for the last.

        The chunking depends only on where the tokens start, so the same tokens after the same
        cached prefix are always evaluated by the same sequence of kernel calls. `proceed` is
        asked before every chunk but the first; False stops there (a warm-up giving way to an
        interaction) and the call returns False, the cache holding the chunks done so far.
        """
        if self.n_past + len(tokens) > self.n_ctx:
            raise NativeError(f"{self.n_past + len(tokens)} tokens do not fit the context of {self.n_ctx}")
        batch = self._batch
        for start in range(0, len(tokens), self.n_batch):
            if start and proceed is not None and not proceed():
                return False
            chunk = tokens[start : start + self.n_batch]
            last_chunk = start + self.n_batch >= len(tokens)
            batch.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = self.n_past + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = last_chunk and i == len(chunk) - 1
            status = self._decode(batch)
            if status != 0:
                raise NativeError(f"llama_decode failed with status {status}")
            self.n_past += len(chunk)
        return True

    def save_sequence(self, seq_id: int = 0) -> bytes:
        """The KV state of one sequence's tokens, without logits (a fraction of a full state)."""
        size = llama_cpp.llama_state_seq_get_size(self._ctx, seq_id)
        buf = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(self._ctx, buf, size, seq_id)
        if written != size:
            raise NativeError("llama.cpp wrote a partial sequence state")
        return bytes(buf)

    def restore_sequence(self, state: bytes, n_tokens: int) -> None:
        """Replace the cache with a state from `save_sequence` holding `n_tokens` tokens."""
        self.clear()
        self.load_sequence(state, 0)
        self.n_past = n_tokens

    def keep_first(self, n_tokens: int) -> None:
        """Drop the solo sequence's tokens past its first `n_tokens`."""
        llama_cpp.llama_memory_seq_rm(self._memory, 0, n_tokens, -1)
        self.n_past = min(self.n_past, n_tokens)

    def load_sequence(self, state: bytes, seq_id: int) -> None:
        """Put a state from `save_sequence` into the (empty) sequence `seq_id`."""
        buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if llama_cpp.llama_state_seq_set_data(self._ctx, buf, len(state), seq_id) != len(state):
            raise NativeError("llama.cpp refused a saved sequence state (out of KV cells?)")

    # --- many sequences (the batched engine) ----------------------------------------------

    def seq_remove(self, seq_id: int, start: int = 0) -> None:
        """Drop the sequence's tokens from position `start` on (cells no other sequence uses are freed)."""
        llama_cpp.llama_memory_seq_rm(self._memory, seq_id, start, -1)

    def seq_copy(self, source: int, dest: int, n_tokens: int) -> None:
        """Share the first `n_tokens` of `source` with `dest` (no copy in a unified cache)."""
        llama_cpp.llama_memory_seq_cp(self._memory, source, dest, 0, n_tokens)

    def decode(self, tokens: list[int], positions: list[int], seq_ids: list[int], logits: list[bool]) -> int:
        """One `llama_decode` of tokens from any sequences; llama.cpp's status (0 ok, 1 no KV
        cells free: nothing was changed, 2 aborted, < 0 error). Logits of row i are read with
        `logits_row(i)` until the next decode."""
        batch = self._batch
        n = len(tokens)
        if n > self.n_batch:
            raise NativeError(f"{n} tokens do not fit a batch of {self.n_batch}")
        batch.n_tokens = n
        for i in range(n):
            batch.token[i] = tokens[i]
            batch.pos[i] = positions[i]
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq_ids[i]
            batch.logits[i] = logits[i]
        return self._decode(batch)

    def logits_row(self, row: int) -> np.ndarray:
        """The logits of batch row `row` of the last decode (a view, valid until the next)."""
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx, row), shape=(self.model.n_vocab,))

    def logits_rows(self, rows: list[int]) -> np.ndarray:
        """The logits of batch rows `rows` of the last decode as one `[rows, n_vocab]` array: a
        view of llama.cpp's buffer when they lie there one after another (the rows a batch asked
        logits for, in order), else a copy."""
        n_vocab = self.model.n_vocab
        addresses = [ctypes.cast(llama_cpp.llama_get_logits_ith(self._ctx, row), ctypes.c_void_p).value for row in rows]
        if not all(addresses):
            raise NativeError(f"no logits for batch rows {rows}")
        first = addresses[0]
        assert first is not None
        if all(address == first + i * n_vocab * 4 for i, address in enumerate(addresses)):
            return _floats(first, len(rows) * n_vocab).reshape(len(rows), n_vocab)
        return np.stack([_floats(address, n_vocab) for address in addresses if address is not None])

    def close(self) -> None:
        if self._ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
