"""Chat templates: turn a prompt's messages into the model's own markup.

The static prefix is the system message; the context, the conversation's turns and the
player's new message follow as user and assistant messages. The rendered text is split right
after the system content, so the model-formatted prefix is a pure function of the static
prefix and can be cached as KV state.
"""

from __future__ import annotations

from dataclasses import dataclass

from jinja2.sandbox import ImmutableSandboxedEnvironment

#: Templates for GGUF files that carry none. `chatml` suits most instruct models; `gemma` folds
#: the system message into the first user turn, since Gemma has no system role.
BUILTIN_TEMPLATES = {
    "chatml": (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    "gemma": (
        "{{ bos_token }}{% for message in messages[1:] %}"
        "{% if message['role'] == 'user' %}<start_of_turn>user\n"
        "{% if loop.first %}{{ messages[0]['content'] }}\n\n{% endif %}"
        "{% else %}<start_of_turn>model\n{% endif %}{{ message['content'] }}<end_of_turn>\n"
        "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
    ),
}


class TemplateError(ValueError):
    """The chat template cannot render a split prompt."""


@dataclass(frozen=True)
class SplitPrompt:
    prefix: str
    suffix: str


class ChatTemplate:
    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "") -> None:
        source = BUILTIN_TEMPLATES.get(source, source)
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        self.source = source
        self._template = env.from_string(source)
        self._bos = bos_token
        self._eos = eos_token

    def render(self, messages: list[dict[str, str]]) -> SplitPrompt:
        """`messages` start with the system message; the split falls right after its content."""
        system = messages[0]["content"]
        text = self._template.render(messages=messages, add_generation_prompt=True, bos_token=self._bos, eos_token=self._eos)
        at = text.find(system)
        if not system or at < 0:
            raise TemplateError("the chat template does not render the system message verbatim")
        cut = at + len(system)
        return SplitPrompt(prefix=text[:cut], suffix=text[cut:])
