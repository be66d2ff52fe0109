"""A slow, one-row restatement of transformers' DiffusionGemma `generate`
(transformers/models/diffusion_gemma/generation_diffusion_gemma.py), calling its
model's encoder and decoder: the tests check it against `generate` itself, then the
engine against it and against `generate`. Random draws come from the row's own
generator, in generate's order: the canvas's uniform init, then per step the
multinomial sample of every canvas position and the uniform renoise draw."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache


@dataclass
class Settings:
    max_denoising_steps: int
    entropy_bound: float
    t_min: float
    t_max: float
    stability_threshold: int
    confidence_threshold: float

    @classmethod
    def from_generation_config(cls, raw: dict[str, Any]) -> Settings:
        return cls(raw["max_denoising_steps"], raw["sampler_config"]["entropy_bound"],
                   raw["t_min"], raw["t_max"], raw["stability_threshold"],
                   raw["confidence_threshold"])


def entropy(logits: torch.Tensor) -> torch.Tensor:
    return torch.distributions.Categorical(logits=logits).entropy()


@torch.no_grad()
def reference_generate(model: Any, prompt: list[int], seed: int, settings: Settings,
                       max_new_tokens: int, eos_id: int, pad_id: int
                       ) -> tuple[list[int], int]:
    """The answer (whole canvases, pad after the first EOS) and the decoder forwards."""
    generator = torch.Generator().manual_seed(seed)
    length = model.config.canvas_length
    vocab = model.config.text_config.vocab_size
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    ids = torch.tensor([prompt])
    pending = ids  # tokens the encoder has not seen yet
    answer: list[int] = []
    forwards = 0
    for _ in range(math.ceil(max_new_tokens / length)):
        start = ids.shape[1] - pending.shape[1]
        model.model.encoder(input_ids=pending, cache=cache,
                            position_ids=torch.arange(start, ids.shape[1])[None])
        positions = torch.arange(ids.shape[1], ids.shape[1] + length)[None]
        canvas = torch.randint(0, vocab, (1, length), generator=generator)
        argmax = canvas
        conditioning = None
        history = torch.full((settings.stability_threshold, length), -1)
        for step in reversed(range(1, settings.max_denoising_steps + 1)):
            forwards += 1
            logits = model(decoder_input_ids=canvas, cache=cache,
                           self_conditioning_logits=conditioning,
                           decoder_position_ids=positions).logits
            temperature = settings.t_min + (settings.t_max - settings.t_min) * (
                step / settings.max_denoising_steps)
            logits = logits / temperature
            probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
            sampled = torch.multinomial(probs.view(-1, vocab), 1,
                                        generator=generator).view(1, length)
            argmax = logits.argmax(-1)
            token_entropy = entropy(logits)
            ordered, order = token_entropy.sort(dim=-1)
            chosen = ordered.cumsum(-1) - ordered <= settings.entropy_bound
            accepted = torch.zeros_like(chosen).scatter(-1, order, chosen)
            noise = torch.randint(0, vocab, (1, length), generator=generator)
            canvas = torch.where(accepted, sampled, noise)
            stable = bool((history == argmax).all())  # True when the threshold is 0
            if len(history):
                history = torch.cat([history[1:], argmax])
            confident = float(token_entropy.mean()) < settings.confidence_threshold
            conditioning = logits
            if stable and confident:
                break
        tokens = argmax[0].tolist()
        answer += tokens
        ids = torch.cat([ids, argmax], dim=1)
        pending = argmax
        if eos_id in tokens:
            stop = len(answer) - length + tokens.index(eos_id)
            return answer[:stop + 1] + [pad_id] * (len(answer) - stop - 1), forwards
    return answer, forwards
