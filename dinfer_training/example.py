"""One task example: the prompt, its reference answer and, for infill, the text after the
gap and the span length the gap is given."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    """`answer` is what the model writes: a completion after `prompt`, or for infill the
    middle between `prompt` and `suffix`, in a span of `span` masked positions (the
    middle, then EOS to the span's end). `source` names the text an infill example was
    cut from (a task prompt or a whole function), so training can keep every held-out
    source out of its examples."""

    task: str
    prompt: str
    answer: str
    suffix: str = ""
    span: int = 0
    source: str = ""

    @property
    def key(self) -> str:
        """What training must not see again: the source of an infill, else the prompt."""
        return self.source or self.prompt
