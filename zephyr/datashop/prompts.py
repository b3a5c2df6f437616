"""Turning a prompt template and a document into the exact text an LM sees.

The example is truncated to fit the model context (and `max_example_tokens`); the instructions
never are, because a prompt cut mid-instruction yields labels for a different question.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from zephyr.datashop.config import EXAMPLE_SLOT, PromptConfig

__all__ = ["TextCodec", "HFCodec", "ApproxCodec", "RenderedPrompt", "render_prompt"]

# Tokens kept free besides the answer: re-tokenising text around the cut can merge or split a few.
_SLACK_TOKENS = 8


class TextCodec(Protocol):
    """The tokenizer-side operations prompt rendering needs."""

    def count(self, text: str) -> int: ...

    def truncate(self, text: str, max_tokens: int) -> str: ...

    def format(self, user: str, system: str | None, answer_prefix: str, use_chat_template: bool) -> str: ...


@dataclass(frozen=True)
class HFCodec:
    """A Hugging Face tokenizer: exact counts, and the model's own chat template."""

    tokenizer: Any

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def truncate(self, text: str, max_tokens: int) -> str:
        # Encode at most ~12 chars per kept token: tokenising a 1 MB page to keep 512 tokens is waste.
        head = text[: max(64, max_tokens * 12)]
        ids = self.tokenizer.encode(head, add_special_tokens=False)
        if len(ids) <= max_tokens and len(head) == len(text):
            return text
        return self.tokenizer.decode(ids[:max_tokens], skip_special_tokens=True)

    def format(self, user: str, system: str | None, answer_prefix: str, use_chat_template: bool) -> str:
        if use_chat_template and getattr(self.tokenizer, "chat_template", None):
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return text + answer_prefix
        return _plain_format(user, system, answer_prefix)


@dataclass(frozen=True)
class ApproxCodec:
    """No local tokenizer (a remote model): ~4 characters per token, prompts sent without chat markup."""

    chars_per_token: float = 4.0

    def count(self, text: str) -> int:
        return int(len(text) / self.chars_per_token) + 1

    def truncate(self, text: str, max_tokens: int) -> str:
        return text[: int(max_tokens * self.chars_per_token)]

    def format(self, user: str, system: str | None, answer_prefix: str, use_chat_template: bool) -> str:
        return _plain_format(user, system, answer_prefix)


def _plain_format(user: str, system: str | None, answer_prefix: str) -> str:
    body = f"{system}\n\n{user}" if system else user
    return f"{body}\n\n{answer_prefix}" if answer_prefix else f"{body}\n"


@dataclass(frozen=True)
class RenderedPrompt:
    """A prompt with its example filled in: the text sent to the model, the example's tokens, and whether the
    example was cut to fit."""

    text: str
    example_tokens: int
    truncated: bool


def render_prompt(
    prompt: PromptConfig,
    example: str,
    codec: TextCodec,
    *,
    context_tokens: int,
    answer_tokens: int,
    max_example_tokens: int | None,
) -> RenderedPrompt:
    """The full prompt for one document, with the example cut so prompt + answer fit `context_tokens`."""
    head, tail = prompt.template.split(EXAMPLE_SLOT)

    def build(ex: str) -> str:
        return codec.format(head + ex + tail, prompt.system, prompt.answer_prefix, prompt.use_chat_template)

    fixed = codec.count(build(""))
    budget = context_tokens - fixed - answer_tokens - _SLACK_TOKENS
    if budget < 1:
        raise ValueError(
            f"The prompt instructions alone take {fixed} tokens, leaving no room for the example in a "
            f"{context_tokens}-token context with {answer_tokens} answer tokens. Shorten the template or "
            "raise labeler.max_context_tokens (up to the model's context length)."
        )
    if max_example_tokens is not None:
        budget = min(budget, max_example_tokens)
    cut = codec.truncate(example, budget)
    return RenderedPrompt(
        text=build(cut), example_tokens=min(budget, codec.count(cut)), truncated=len(cut) < len(example)
    )
