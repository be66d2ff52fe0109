"""Ceilings on the work one request may ask for, tied to what each engine parameter can
mean on the model that runs it (docs/adr/017-tenants.md). The parameter checks
(formats/parameters/params.py) only make values storable; these make them affordable: a value past
its ceiling buys no better answer, only more memory or forwards (`prefix_look: 10**12`
asked one worker for 512 TB). Checked at submit on the resolved configuration (the
request's values over the model's defaults), so a line over a ceiling fails alone,
naming the field.

Every numeric parameter is listed in CEILINGS (tests/api/test_tenant_costs.py checks each
numeric row of the table), a generation field's from its row's ceiling column
(dinfer_engine/generation_fields.py): those without a cost of their own (temperature,
seed, the fractions) are bounded where they are checked."""

from __future__ import annotations

from typing import Any

from dinfer_batch.formats.parameters.params import INFILL_LENGTHS
from dinfer_engine.generation_fields import FIELDS

# parameter -> what its ceiling is, in words (for the docs and the error message): the
# generation fields' from their rows, the service's own here
CEILINGS = {field.service_name: field.ceiling.why for field in FIELDS.values()
            if field.ceiling is not None and field.request} | {
    "n": "128 (OpenAI's; checked in formats/parameters/params.py), and the key's "
         "max_request_tokens for max_tokens x n",
    INFILL_LENGTHS: "16 candidates (checked in formats/parameters/params.py), each within the "
                      "model's context with its canvas (checked with the prompt, "
                      "jobs/intake/line_check.py)",
}


def over_ceiling(config: Any, max_context: int, vocab_size: int | None) -> str | None:
    """'<field> must be at most <limit> (<why>), got <value>' for the first parameter of a
    resolved engine configuration past its ceiling (a logit_bias id outside the model's
    vocabulary: the id), else None. A ceiling bound to the
    field's decoders (per_decoder) holds only while one of them runs."""
    bounds = {"context": max_context, "vocabulary": vocab_size}
    outside = [key for key in (config.logit_bias or {})
               if vocab_size is not None and int(key) >= vocab_size]
    if outside and vocab_size is not None:
        return (f"logit_bias names token {outside[0]}, outside the model's vocabulary of "
                f"{vocab_size:,} tokens (ids 0 to {vocab_size - 1:,})")
    for name, field in FIELDS.items():
        ceiling = field.ceiling
        if ceiling is None or ceiling.bound is None:
            continue
        if ceiling.per_decoder and config.decoder not in field.decoders:
            continue
        limit = bounds[ceiling.bound] if ceiling.bound in bounds \
            else getattr(config, ceiling.bound)
        value = getattr(config, name)
        if limit is not None and value > limit:
            return f"{name} must be at most {limit:,} ({ceiling.why}), got {value:,}"
    return None
