"""Ceilings on the work one request may ask for, tied to what each engine parameter can
mean on the model that runs it (docs/adr/017-tenants.md). The parameter checks
(formats/params.py) only make values storable; these make them affordable: a value past
its ceiling buys no better answer, only more memory or forwards (`prefix_look: 10**12`
asked one worker for 512 TB). Checked at submit on the resolved configuration (the
request's values over the model's defaults), so a line over a ceiling fails alone,
naming the field.

Every numeric parameter is listed in CEILINGS (tests/test_ceilings.py holds the list to
params.CHECKS): those without a cost of their own (temperature, seed, the fractions) are
bounded where they are checked."""

from __future__ import annotations

from typing import Any

# parameter -> what its ceiling is, in words (for the docs and the error message)
CEILINGS = {
    "max_tokens": "the model's context length minus the prompt's tokens (checked with the "
                  "prompt, jobs/line_check.py)",
    "block_length": "max_tokens (a block is part of the answer)",
    "steps": "max_tokens (one committed token per step at least; more steps add forwards "
             "that commit nothing)",
    "warmup_steps": "the model's context length (warm-up forwards are some of the steps: "
                    "past them it changes nothing)",
    "prefix_look": "the model's context length (the look-back cannot reach past the canvas)",
    "after_look": "the model's context length (the look-ahead cannot reach past the canvas)",
    "top_k": "the model's vocabulary size (the k most likely of all tokens)",
    "top_logprobs": "20 (OpenAI's; checked in formats/params.py)",
    "n": "128 (OpenAI's; checked in formats/params.py), and the key's max_request_tokens "
         "for max_tokens x n",
    "seed": "2**63 - 1 (checked in formats/params.py; costs nothing)",
    "temperature": "any finite number >= 0 (costs nothing)",
    "num_to_transfer": "block_length (a step cannot place more tokens than its block has; "
                       "the editing decoder's only)",
    "max_post_steps": "the model's context length (passes over a finished block, a forward "
                      "each; the editing decoder's only)",
    "infill_lengths": "16 candidates (checked in formats/params.py), each within the "
                      "model's context with its canvas (checked with the prompt, "
                      "jobs/line_check.py)",
    "threshold": "1", "low_threshold": "1", "top_p": "1", "cont_weight": "1",
    "editing_threshold": "1",
    "max_denoising_steps": "the model's context length (a decoder forward each, per canvas)",
    "stability_threshold": "max_denoising_steps (a canvas cannot be stable over more steps "
                           "than it has)",
    "entropy_bound": "any finite number > 0 (costs nothing)",
    "confidence_threshold": "any finite number > 0 (costs nothing)",
    "t_min": "any finite number >= 0 (costs nothing)",
    "t_max": "any finite number >= 0 (costs nothing)",
}


def over_ceiling(config: Any, max_context: int, vocab_size: int | None) -> str | None:
    """'<field> must be at most <limit> (<why>), got <value>' for the first parameter of a
    resolved engine configuration past its ceiling, else None."""
    bounds: list[tuple[str, int, int | None]] = [
        ("block_length", config.block_length, config.gen_length),
        ("steps", config.steps, config.gen_length),
        ("warmup_steps", config.warmup_steps, max_context),
        ("prefix_look", config.prefix_look, max_context),
        ("after_look", config.after_look, max_context),
        ("top_k", config.top_k, vocab_size),
        ("max_denoising_steps", config.max_denoising_steps, max_context),
        ("stability_threshold", config.stability_threshold, config.max_denoising_steps)]
    if config.decoder == "editing":
        bounds += [("num_to_transfer", config.num_to_transfer, config.block_length),
                   ("max_post_steps", config.max_post_steps, max_context)]
    for name, value, limit in bounds:
        if limit is not None and value > limit:
            return f"{name} must be at most {limit:,} ({CEILINGS[name]}), got {value:,}"
    return None
