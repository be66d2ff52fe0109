"""The sampling controls written from their definitions (docs/engine.md), slow: one row,
one position and one token at a time, as a model wrapper that the tests' one-row
references (LLaDA's generate, Fast-dLLM's threshold rule, LLaDA2's and LLaDA2.1's loops)
call instead of the model. At every forward, each position's logits get, in this order:
- each `logit_bias` token's bias added;
- for each token the answer holds (its positions that are not masks; a position's own
  token not counted against itself), with n its count: a positive logit divided by
  repetition_penalty, another multiplied, then frequency_penalty x n and presence_penalty
  subtracted;
- at the answer's positions before min_tokens (all with ignore_eos) every stop token at
  -inf.
In float32, as the model's logits (so the same rounding as any implementation that
computes in them)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch

from tests.tiny_model import MASK_ID

Forward = Callable[[torch.Tensor], torch.Tensor]  # ids [L] -> logits [L, V]


@dataclass(frozen=True)
class Controls:
    logit_bias: dict[int, float] = field(default_factory=dict)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    ignore_eos: bool = False
    min_tokens: int = 0

    def fields(self) -> dict[str, Any]:
        """As GenerationConfig takes them (logit_bias keys as OpenAI writes them)."""
        return {"logit_bias": {str(t): b for t, b in self.logit_bias.items()} or None,
                "presence_penalty": self.presence_penalty,
                "frequency_penalty": self.frequency_penalty,
                "repetition_penalty": self.repetition_penalty,
                "ignore_eos": self.ignore_eos, "min_tokens": self.min_tokens}


def f32(value: float) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float32)


def controlled_logits(logits: torch.Tensor, ids: torch.Tensor, prompt_length: int,
                      gen_length: int, controls: Controls, stops: list[int]) -> torch.Tensor:
    """The logits [L, V] of the window `ids` [L] whose answer is ids[prompt_length:
    prompt_length + gen_length], under `controls`."""
    out = logits.clone()
    answer = range(prompt_length, min(prompt_length + gen_length, len(ids)))
    held = Counter(int(ids[j]) for j in answer if int(ids[j]) != MASK_ID)
    for j in range(len(ids)):
        row = out[j]
        for token, bias in controls.logit_bias.items():
            row[token] = row[token] + f32(bias)
        for token, count in held.items():
            times = count - (1 if j in answer and int(ids[j]) == token else 0)
            if times == 0:
                continue
            value = row[token]
            if value > 0:
                value = value / f32(controls.repetition_penalty)
            else:
                value = value * f32(controls.repetition_penalty)
            value = value - f32(controls.frequency_penalty) * f32(times)
            row[token] = value - f32(controls.presence_penalty)
        if j in answer and (controls.ignore_eos or j - prompt_length < controls.min_tokens):
            for stop in stops:
                row[stop] = -torch.inf
    return out


def controlled_forward(forward: Forward, prompt_length: int, gen_length: int,
                       controls: Controls, stops: list[int]) -> Forward:
    """A window's forward ([L] -> [L, V]) with the controls applied."""

    def run(ids: torch.Tensor) -> torch.Tensor:
        return controlled_logits(forward(ids), ids, prompt_length, gen_length, controls,
                                 stops)

    return run


class ControlledModel:
    """A model whose `model(x).logits` ([1, L] -> [1, L, V]) has the controls applied,
    for the references that call a model."""

    def __init__(self, model: Any, prompt_length: int, gen_length: int, controls: Controls,
                 stops: list[int]) -> None:
        self.model = model
        self.forward = controlled_forward(lambda ids: model(ids[None]).logits[0],
                                          prompt_length, gen_length, controls, stops)

    def __call__(self, x: torch.Tensor) -> SimpleNamespace:
        return SimpleNamespace(logits=self.forward(x[0])[None])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)
