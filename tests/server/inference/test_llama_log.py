"""llama.cpp's log as a player's log shows it: warnings and errors, and one calm line of ours in
place of "this is probably a bug in the model" for a catalogue model's typed control tokens."""

from __future__ import annotations

from loreguard.server.inference import llama_native
from loreguard.server.inference.llama_native import CONTROL_LOOKING_NOTE, shown_log

WARN, INFO = 3, 2


def test_control_looking_tokens_are_one_line_of_ours(monkeypatch) -> None:
    monkeypatch.setitem(llama_native._log_state, "control_noted", False)
    said = [
        shown_log(
            WARN, f"load: control-looking token: {n} '</s>' was not control-type; this is probably a bug in the model\n".encode()
        )
        for n in (128247, 128248, 128249)
    ]
    assert said == [CONTROL_LOOKING_NOTE, None, None]
    assert "probably a bug" not in CONTROL_LOOKING_NOTE and CONTROL_LOOKING_NOTE.endswith("harmless\n")


def test_other_warnings_pass_and_information_does_not() -> None:
    assert (
        shown_log(WARN, b"llama_context: n_ctx_per_seq (512) < n_ctx_train\n")
        == "llama_context: n_ctx_per_seq (512) < n_ctx_train\n"
    )
    assert shown_log(INFO, b"load_tensors: loading model tensors\n") is None
