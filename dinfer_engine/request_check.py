"""What one request may combine, from the registry entries' capabilities
(dinfer_engine/choices.py): the rule and its message, once. The engine asks it of each
prompt before any forward (engine.py); the service of each line at submit
(dinfer_batch/jobs/intake/line_check.py), so a line fails alone with the engine's words.
Read without torch."""

from __future__ import annotations

from dinfer_engine.choices import CANVASES, DECODERS, FAMILIES

# where a caller passes no word of its own for a request with given text after its gaps
INFILL = "infill"
# what the rules call a constrained answer (docs/structured-outputs.md)
CONSTRAINED = "structured outputs"
CHOSEN = "(decoder, preset, or the model's default)"


def request_problem(family: str | None, decoder: str, *, infill: bool = False,
                    constrained: bool = False, infill_name: str = INFILL,
                    stops_banned: bool = False) -> str | None:
    """Why a request cannot run on `family` (a FAMILIES key; None: a model no family
    reads, taken as a masked one) with its resolved `decoder`, filling gaps (`infill`,
    called `infill_name` in the message), under a constraint, or with stop tokens banned
    from some answer positions (`stops_banned`: ignore_eos, min_tokens); None when it
    can."""
    name = FAMILIES[family].name if family else "this model"
    canvas = CANVASES[FAMILIES[family].canvas if family else "masked"]
    rewrites = DECODERS[decoder].rewrites
    if infill and not canvas.fills_in:
        return (f"{infill_name} needs a bidirectional model: {name} decodes blocks left to "
                "right (block-causal attention), so text after a gap cannot steer it")
    if infill and rewrites:
        return (f"{infill_name} cannot use the {decoder} decoder {CHOSEN}: it rewrites "
                "placed tokens, which would include the given text")
    if constrained and rewrites:
        return (f"{CONSTRAINED} cannot use the {decoder} decoder {CHOSEN}: it rewrites "
                "committed tokens, which the constraint has fixed")
    if constrained and infill:
        return f"{CONSTRAINED} apply to an answer, not to {infill_name} gaps"
    if constrained and stops_banned:
        return (f"{CONSTRAINED} cannot use ignore_eos or min_tokens: a constrained answer "
                "ends with a stop token where its grammar ends")
    return None
