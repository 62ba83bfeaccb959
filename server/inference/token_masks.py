"""The output grammar as token bitmasks, by llguidance.

A mask has one bit per vocabulary token: may the grammar's next token be this one. llguidance
computes it from the grammar's state in tens of microseconds (a lexer over the vocabulary's
byte trie, in Rust, with the GIL released), for every row of a batch at once on its own threads,
so the sampler applies one mask per row instead of asking the grammar token by token.

`MaskVocabulary` is built once per model (llguidance's tokenizer reads every token's bytes,
about a second at a 150k vocabulary). `OutputMatcher` follows one generation through the
grammar. The grammar is the GBNF `grammar.compile_schema` writes, read through llguidance's own
GBNF-to-Lark converter.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import re
from collections.abc import Sequence
from functools import lru_cache

import llama_cpp
import llguidance
import numpy as np
from llguidance.gbnf_to_lark import gbnf_to_lark

from loreguard.server.inference.llama_native import NativeError, NativeModel

#: Where DRY stops matching a repeated sequence (llama.cpp's defaults): a new line, a colon, a
#: quote, an asterisk. A token whose text holds one is a breaker.
DRY_SEQUENCE_BREAKERS = (b"\n", b":", b'"', b"*")


def llguidance_version() -> str:
    return importlib.metadata.version("llguidance")


def mask_words(n_vocab: int) -> int:
    """32-bit words in one row of a token mask."""
    return (n_vocab + 31) // 32


class MaskVocabulary:
    """What masks and the sampler need of one model's vocabulary: llguidance's tokenizer (its
    end tokens are the model's end-of-generation tokens), which tokens break a DRY sequence, and
    a thread pool for filling a batch's masks."""

    def __init__(self, model: NativeModel) -> None:
        self.n_vocab = model.n_vocab
        tokens, ends, breakers = _read_vocabulary(model)
        if not ends:
            raise NativeError("the model has no end-of-generation token for the grammar to end on")
        tokenize = ctypes.cast(llama_cpp.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
        # Missing from llguidance's stubs; its own `llguidance.llamacpp` calls it the same way.
        self.tokenizer = llguidance.LLTokenizer.from_llamacpp(  # type: ignore[attr-defined]
            tokens=tokens, vocab_ptr=model.vocab, tokenize_fptr=tokenize, eos_token=ends, slices=None
        )
        #: 1 for a token whose text holds a DRY sequence breaker, else 0 (bytes: fast to index).
        self.breaker_flags = breakers
        #: Each token's bytes as it adds them to the output (a control token adds none): what the
        #: dialogue guard decodes.
        self.pieces = [b"" if piece.startswith(b"\xff") else piece for piece in tokens]
        self.executor = llguidance.LLExecutor()

    def matcher(self, gbnf: str) -> OutputMatcher:
        return OutputMatcher(self, gbnf)

    def fill(self, matchers: Sequence[OutputMatcher | None], masks: np.ndarray) -> None:
        """Row i of `masks` (int32, [rows, mask_words]) becomes matcher i's mask; rows without a
        matcher are left as they are. The rows are filled in parallel, the GIL released. A
        matcher in error (`OutputMatcher.check`) leaves its row allowing nothing."""
        pairs = [(m.native, i) for i, m in enumerate(matchers) if m is not None]
        if not pairs:
            return
        assert masks.dtype == np.int32 and masks.flags["C_CONTIGUOUS"]
        if len(pairs) == 1:
            matcher, row = pairs[0]
            matcher.unsafe_compute_mask_ptr(masks[row].ctypes.data, masks.shape[1] * 4)
        else:
            self.executor.unsafe_compute_mask_ptr(pairs, masks.ctypes.data, masks.shape[1] * 4, masks.shape[0])


#: Any DRY sequence breaker in a token's bytes.
_BREAKER = re.compile(b"|".join(re.escape(b) for b in DRY_SEQUENCE_BREAKERS))


def _read_vocabulary(model: NativeModel) -> tuple[list[bytes], list[int], bytes]:
    """One pass over the vocabulary (a second at 150k tokens, at start-up): each token's bytes as
    llguidance reads them (control tokens marked with a 0xFF byte, so no grammar of ours admits
    them), the end-of-generation tokens, and which tokens break a DRY sequence (a control token,
    written as nothing, breaks none)."""
    buffer = ctypes.create_string_buffer(1024)
    tokens: list[bytes] = []
    ends: list[int] = []
    breakers = bytearray(model.n_vocab)
    for token in range(model.n_vocab):
        n = llama_cpp.llama_token_to_piece(model.vocab, token, buffer, len(buffer), 0, True)
        if n < 0:
            raise NativeError(f"token {token}'s text does not fit {len(buffer)} bytes")
        piece = buffer.raw[:n]
        attr = llama_cpp.llama_vocab_get_attr(model.vocab, token)
        if attr & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL:
            piece = b"\xff" + piece
        else:
            breakers[token] = _BREAKER.search(piece) is not None
            if attr & llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED and piece.startswith(b"<") and piece.endswith(b">"):
                piece = b"\xff" + piece
        tokens.append(piece)
        if model.is_end_of_generation(token):
            ends.append(token)
    return tokens, ends, bytes(breakers)


@lru_cache(maxsize=256)
def lark_grammar(gbnf: str) -> str:
    """The GBNF grammar in llguidance's Lark dialect (the same language)."""
    return gbnf_to_lark(gbnf)


class OutputMatcher:
    """One generation's place in the output grammar."""

    def __init__(self, vocabulary: MaskVocabulary, gbnf: str) -> None:
        try:
            lark = lark_grammar(gbnf)
        except Exception as exc:  # the converter's own error types; the message says where
            raise NativeError(f"the output grammar could not be read: {exc}") from exc
        self.native = llguidance.LLMatcher(vocabulary.tokenizer, lark, log_level=0)
        self.check()

    def check(self) -> None:
        if self.native.is_error():
            raise NativeError(f"the output grammar failed: {self.native.get_error()}")

    def allows(self, token: int) -> bool:
        """Whether the grammar may go on with `token` (asked before forcing a token on it)."""
        return self.native.validate_tokens([token]) == 1

    def forced_tokens(self) -> list[int]:
        """The tokens the grammar allows alone from here, in canonical tokenisation (empty when
        the next token is the model's choice)."""
        return list(self.native.compute_ff_tokens())

    def consume(self, token: int) -> None:
        if not self.native.consume_token(token):
            raise NativeError(f"the output grammar refuses token {token}: {self.native.get_error()}")
