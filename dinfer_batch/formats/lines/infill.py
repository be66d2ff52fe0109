"""Fill-in-the-middle lines (docs/infill.md): OpenAI's `suffix` on completions lines, and
our extension of it to several gaps, as request fields; the length search's candidates
are the `infill_lengths` parameter (checked in formats/parameters/params.py).

    {"prompt": "def f(a, b):\\n", "suffix": "\\n    return c\\n", "max_tokens": 16}
    {"prompt": "x = (", "suffix": [", ", ")"], "spans": [4, 6]}

`suffix` is the text after the gap, or a list of the texts after each of several gaps;
`spans` (optional) gives each gap's length in tokens (else every gap is `max_tokens`
long). A normalised infill request holds `suffix` as a list and `spans` when given."""

from __future__ import annotations

from typing import Any

from dinfer_batch.formats.limits import MAX_INT, InvalidParam, shown
from dinfer_batch.formats.parameters.compat import spelling
from dinfer_batch.formats.parameters.params import INFILL_LENGTHS
from dinfer_engine.infill import Infill

MAX_GAPS = 64


def infill_fields(body: dict[str, Any], expected: str) -> dict[str, Any]:
    """The body's `suffix` and `spans`, checked, as request fields ({} for none); they
    are taken out of `body`. Chat bodies have no suffix (OpenAI's chat has none)."""
    suffix, spans = body.pop("suffix", None), body.pop("spans", None)
    if suffix is None:
        if spans is not None:
            raise InvalidParam("spans gives the lengths of the gaps of a `suffix` line; "
                               "this line has no suffix")
        return {}
    if expected != "prompt":
        raise InvalidParam("suffix (fill in the middle) belongs to completions lines "
                           '({"prompt", "suffix"}); chat requests have no suffix')
    pieces = [suffix] if isinstance(suffix, str) else suffix
    if not isinstance(pieces, list) or not pieces or len(pieces) > MAX_GAPS \
            or not all(isinstance(p, str) for p in pieces):
        raise InvalidParam(f"suffix must be a string, or a list of 1 to {MAX_GAPS} strings "
                           f"(the text after each gap), got {shown(suffix)}")
    fields: dict[str, Any] = {"suffix": pieces}
    if spans is not None:
        if not isinstance(spans, list) or len(spans) != len(pieces) or not all(
                _positive(s) for s in spans):
            raise InvalidParam(f"spans must be a list of {len(pieces)} positive integers "
                               f"(one length per gap), got {shown(spans)}")
        fields["spans"] = spans
    return fields


def check_request(request: dict[str, Any]) -> None:
    """What an infill request and its parameters must agree on."""
    params = request["params"]
    if INFILL_LENGTHS in params:
        if "suffix" not in request:
            raise InvalidParam(f"{INFILL_LENGTHS} searches the length of the gap of a "
                               "`suffix` line; this line has no suffix")
        if "spans" in request:
            raise InvalidParam(f"give either spans (fixed gap lengths) or {INFILL_LENGTHS} "
                               "(a search over lengths), not both")


def canvas(request: dict[str, Any], params: dict[str, Any], prompt: str = "") -> Infill:
    """The engine's infill prompt of a `suffix` request: `prompt`, then its gaps and
    pieces, with its spans or the length search of `params` (its effective ones)."""
    return Infill([prompt, *request["suffix"]], spans=request.get("spans"),
                  lengths=params.get(INFILL_LENGTHS))


def answer_tokens(request: dict[str, Any], params: dict[str, Any], gen_length: int) -> int:
    """The masked positions the request's longest canvas holds (its answer tokens)."""
    if "suffix" not in request:
        return gen_length
    if "spans" in request:
        return sum(request["spans"])
    lengths = params.get(INFILL_LENGTHS)
    longest = max(lengths) if isinstance(lengths, list) else gen_length
    return longest * len(request["suffix"])


def answer_source(request: dict[str, Any], params: dict[str, Any], gen_length: int) -> str:
    """What set `answer_tokens`, named as the request spelt it, with its value: the
    line's field, the batch's, or the model's default (`params`: the effective ones)."""
    gaps = len(request.get("suffix", []))
    per_gap = f" x {gaps} gaps" if gaps > 1 else ""
    if "spans" in request:
        return f"spans {shown(request['spans'])}"
    lengths = params.get(INFILL_LENGTHS)
    if gaps and isinstance(lengths, list):
        return f"{INFILL_LENGTHS} up to {max(lengths):,}{per_gap}"
    if "max_tokens" in request["params"]:
        source = f"{spelling(request, 'max_tokens')}={request['params']['max_tokens']:,}"
    elif "max_tokens" in params:
        source = f"the batch's max_tokens={params['max_tokens']:,}"
    else:
        source = f"the model's default answer length of {gen_length:,} tokens"
    return source + per_gap


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_INT
