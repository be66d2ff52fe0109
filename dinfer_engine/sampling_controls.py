"""What a request asks of each step's choice of tokens beyond the model's own logits: the
sampling controls OpenAI's and vLLM's APIs define (`logit_bias`, presence, frequency and
repetition penalties, `min_p`, `ignore_eos`, `min_tokens`), defined for a diffusion row
over the answer it has committed so far (docs/engine.md, docs/adr/060-sampling-controls.md;
applied by dinfer_engine/decoding/controls.py). One object per request, carried on the
engine's `Request`, so that rows with different controls share a batch and a row's tokens
do not depend on its neighbours. Read without torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any

from dinfer_engine.fields import token_id
from dinfer_engine.generation_fields import ResolvedConfig


@dataclass(frozen=True)
class SamplingControls:
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias added to its logit)
    presence_penalty: float = 0.0  # subtracted once from a token the answer holds
    frequency_penalty: float = 0.0  # subtracted per time the answer holds the token
    repetition_penalty: float = 1.0  # a held token's logit divided (> 0) or multiplied (< 0)
    min_p: float = 0.0  # tokens below min_p x the position's top probability are not drawn
    ignore_eos: bool = False  # the answer never ends early: no position may commit EOS
    min_tokens: int = 0  # no EOS at the answer's first min_tokens positions

    @property
    def neutral(self) -> bool:
        """True when the controls change no logit (the default)."""
        return self == NEUTRAL

    @property
    def penalised(self) -> bool:
        """True when the answer's tokens change the logits (a penalty is set)."""
        return (self.presence_penalty, self.frequency_penalty, self.repetition_penalty) \
            != (0.0, 0.0, 1.0)

    @property
    def stops_banned_before(self) -> int:
        """The answer index before which no stop token may be committed (a huge one with
        ignore_eos: every position)."""
        return 2**62 if self.ignore_eos else self.min_tokens

    @classmethod
    def of(cls, config: ResolvedConfig, vocabulary: int) -> SamplingControls:
        """A resolved config's controls; ValueError naming a logit_bias id outside the
        model's `vocabulary`."""
        controls = cls.given({name: getattr(config, name) for name in FIELD_NAMES})
        outside = [token for token, _ in controls.logit_bias if token >= vocabulary]
        if outside:
            raise ValueError(f"logit_bias names token {outside[0]}, outside the model's "
                             f"vocabulary of {vocabulary:,} tokens")
        return controls

    @classmethod
    def given(cls, values: Mapping[str, Any]) -> SamplingControls:
        """The controls a request's values of the controls' rows name (the others at their
        neutral value); Engine.generate checks them against the model's vocabulary."""
        bias = tuple(sorted((_token(key), float(value))
                            for key, value in (values.get("logit_bias") or {}).items()))
        return cls(bias, *(type(getattr(NEUTRAL, name))(values.get(name, getattr(NEUTRAL, name)))
                           for name in FIELD_NAMES[1:]))

    def fields(self) -> dict[str, Any]:
        """The controls as the field table's rows (a request's own values over a call's
        config: generation_config.for_request)."""
        return {"logit_bias": dict(self.logit_bias) or None} | {
            name: getattr(self, name) for name in FIELD_NAMES[1:]}


def _token(key: str | int) -> int:
    token = token_id(key)
    if token is None:  # the config's check refuses such keys first
        raise ValueError(f"logit_bias key {key!r} is not a token id")
    return token


NEUTRAL = SamplingControls()
FIELD_NAMES = tuple(f.name for f in dataclass_fields(SamplingControls))  # logit_bias first
