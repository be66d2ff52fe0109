"""What a request asks of each step's choice of tokens beyond the model's own logits: the
sampling controls OpenAI's and vLLM's APIs define (`logit_bias`, presence, frequency and
repetition penalties, `min_p`, `ignore_eos`, `min_tokens`), defined for a diffusion row
over the answer it has committed so far. One object per request, carried on the engine's
`Request`, so that rows with different controls share a batch and a row's tokens do not
depend on its neighbours."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingControls:
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias added to its logit)
    presence_penalty: float = 0.0  # subtracted once from a token the answer holds
    frequency_penalty: float = 0.0  # subtracted per time the answer holds the token
    repetition_penalty: float = 1.0  # a held token's logit divided (> 0) or multiplied (< 0)
    min_p: float = 0.0  # tokens below min_p x the position's top probability are dropped
    ignore_eos: bool = False  # the answer never ends early: no position may commit EOS
    min_tokens: int = 0  # no EOS at the answer's first min_tokens positions

    @property
    def neutral(self) -> bool:
        """True when the controls change no logit (the default)."""
        return self == NEUTRAL


NEUTRAL = SamplingControls()
