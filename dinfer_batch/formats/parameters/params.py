"""Generation parameters as OpenAI / vLLM name them, their checks, and their engine names.

A job carries defaults; any line may override them. `max_tokens` is the engine's
`gen_length`; the diffusion fields keep the engine's own names; `stop` is applied by the
service after generation (the engine has no stop strings)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from dinfer_batch.formats.limits import MAX_INT, InvalidParam, shown
from dinfer_batch.formats.parameters.structured import check_structured
from dinfer_engine.fields import Field, Flag, Integer, Number, TokenBias
from dinfer_engine.generation_fields import FIELDS
from dinfer_engine.request import GenerationRequest
from dinfer_engine.sampling_controls import SamplingControls


def _integer(value: Any, low: int, high: int = MAX_INT) -> bool:
    """An integer (not a bool) in [low, high]: every integer kept fits 64 bits."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _number(value: Any) -> bool:
    """A finite number (not a bool): NaN and infinities are refused, never stored."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _checked_int(name: str, value: Any, low: int, what: str, high: int = MAX_INT) -> int:
    if _integer(value, low, high):
        return value
    if high == MAX_INT and _integer(value, high + 1, value):  # only beyond 64 bits
        raise InvalidParam(f"{name} must be at most {high}, got {shown(value)}")
    raise InvalidParam(f"{name} must be {what}, got {shown(value)}")


def _positive_int(name: str, value: Any) -> int:
    return _checked_int(name, value, 1, "a positive integer")


def _within(bounds: Number) -> Callable[[str, Any], float]:
    def check(name: str, value: Any) -> float:
        if not _number(value) or not bounds.contains(value):
            raise InvalidParam(f"{name} must be a number {bounds.words()}, got {shown(value)}")
        return float(value)

    return check


def _integer_within(bounds: Integer) -> Callable[[str, Any], int]:
    def check(name: str, value: Any) -> int:
        return _checked_int(name, value, bounds.minimum, bounds.words(),
                            high=MAX_INT if bounds.maximum is None else bounds.maximum)

    return check


def _token_bias(bounds: TokenBias) -> Callable[[str, Any], dict[str, float]]:
    """OpenAI's logit_bias: token ids as decimal strings (the model's vocabulary is
    checked with the model, formats/parameters/ceilings.py) to finite numbers within the bounds."""
    def check(name: str, value: Any) -> dict[str, float]:
        problem = bounds.problem(name, value)
        if problem is None and not all(_number(v) for v in value.values()):
            problem = f"{name} values must be finite numbers"
        if problem is not None:
            raise InvalidParam(f"{problem}; got {shown(value)}")
        return {str(key): float(bias) for key, bias in value.items()}

    return check


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidParam(f"{name} must be true or false, got {shown(value)}")
    return value


def _choice(*choices: str) -> Callable[[str, Any], str]:
    def check(name: str, value: Any) -> str:
        if value not in choices:
            raise InvalidParam(f"{name} must be one of {', '.join(choices)}; got {shown(value)}")
        return value

    return check


def _stop(name: str, value: Any) -> list[str]:
    """OpenAI's bound: up to MAX_STOPS sequences; each up to MAX_STOP_CHARS characters."""
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise InvalidParam(f"{name} must be a non-empty string or a list of them, "
                           f"got {shown(value)}")
    if len(stops) > MAX_STOPS:
        raise InvalidParam(f"{name} must hold at most {MAX_STOPS} sequences (OpenAI's "
                           f"limit), got {len(stops):,}")
    for index, stop in enumerate(stops):
        if len(stop) > MAX_STOP_CHARS:
            where = name if isinstance(value, str) else f"{name}[{index}]"
            raise InvalidParam(f"{where} must be at most {MAX_STOP_CHARS} characters, got "
                               f"{len(stop):,}")
    return stops


MAX_STOPS = 4  # OpenAI's limit of stop sequences
MAX_STOP_CHARS = 256  # a stop sequence's characters: longer ones are pasted text, not stops


def _top_k(name: str, value: Any) -> int:
    """vLLM's convention: -1 (or 0) means no limit."""
    return max(_checked_int(name, value, -1, "a positive integer, or -1 for no limit"), 0)


def _n(name: str, value: Any) -> int:
    if _positive_int(name, value) > MAX_SAMPLES:
        raise InvalidParam(f"{name} must be at most {MAX_SAMPLES}, got {shown(value)}")
    return value


# an infill line's search over its gap's length (formats/lines/infill.py): the name, spelt here only
INFILL_LENGTHS = "infill_lengths"


def _infill_lengths(name: str, value: Any) -> list[int] | str:
    """"auto" or a list of candidate span lengths (formats/lines/infill.py)."""
    if value == AUTO_LENGTHS:
        return AUTO_LENGTHS
    if not isinstance(value, list) or not 0 < len(value) <= MAX_CANDIDATES \
            or not all(_integer(v, 1) for v in value):
        raise InvalidParam(f"{name} must be {AUTO_LENGTHS!r} or a list of 1 to "
                           f"{MAX_CANDIDATES} positive integers (candidate span lengths), "
                           f"got {shown(value)}")
    return sorted(set(value))


MAX_CANDIDATES = 16  # span lengths one infill line may search
AUTO_LENGTHS = "auto"  # dinfer_engine.infill.AUTO: max_tokens and its halvings down to 8
def _structured(name: str, value: Any) -> dict[str, str]:
    """A constraint in its stored form (dinfer_batch/formats/parameters/structured.py)."""
    return check_structured(name, value)


MAX_SAMPLES = 128  # OpenAI's limit for n

def _cache_salt(name: str, value: Any) -> str:
    """vLLM's field: prompts share cached prefix blocks only within one owner and salt
    (docs/adr/040-prefix-cache-owners.md)."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_CACHE_SALT_CHARS:
        raise InvalidParam(f"{name} must be a string of 1 to {MAX_CACHE_SALT_CHARS} "
                           f"characters, got {shown(value)}")
    return value


MAX_CACHE_SALT_CHARS = 256


def _from_row(field: Field) -> Callable[[str, Any], Any]:
    """The service's check of a generation field: its row's bounds, in the service's
    words (formats/limits.py shows the value)."""
    check = field.check
    if isinstance(check, Integer):
        return _integer_within(check)
    if isinstance(check, Number):
        return _within(check)
    if isinstance(check, Flag):
        return _bool
    if isinstance(check, TokenBias):
        return _token_bias(check)
    return _choice(*check.choices)


# the service's own spelling of a row's check, where OpenAI's or vLLM's differs
SPELT_CHECKS: dict[str, Callable[[str, Any], Any]] = {"top_k": _top_k}
# parameters the engine's prompts carry, or the service applies (not generation fields)
SERVICE_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "stop": _stop, "n": _n, INFILL_LENGTHS: _infill_lengths, "structured": _structured,
    "cache_salt": _cache_salt,
    # completions' echo and best_of (formats/lines/prompts.py, formats/results/output.py)
    "echo": _bool, "best_of": _n}
CHECKS: dict[str, Callable[[str, Any], Any]] = {
    field.service_name: SPELT_CHECKS.get(field.name) or _from_row(field)
    for field in FIELDS.values() if field.request} | SERVICE_CHECKS
KNOWN = frozenset(CHECKS)
ENGINE_NAMES = {field.service_name: name for name, field in FIELDS.items() if field.spelt}
SERVICE_ONLY = frozenset(SERVICE_CHECKS)


def check_params(raw: dict[str, Any], spelt: dict[str, str] | None = None) -> dict[str, Any]:
    """The parameters in `raw` that are set (not None), checked and normalised; an error
    names a parameter as the user spelt it (`spelt`: ours -> theirs, e.g. max_tokens ->
    max_output_tokens)."""
    if not raw.keys() <= KNOWN:
        unknown = sorted(set(raw) - KNOWN)
        named = ", ".join(name if len(name) <= 60 and name.isprintable() else shown(name)
                          for name in unknown[:5])
        raise InvalidParam(f"unknown parameter(s) {named}{', ...' if unknown[5:] else ''}; "
                           f"supported: {', '.join(CHECKS)}")
    spelt = spelt or {}
    return {name: CHECKS[name](spelt.get(name, name), value) for name, value in raw.items()
            if value is not None}


# the parameters that may differ between requests of one engine call: the field table's
# per-row rows (each engine request carries its own: dinfer_engine/request.py) and the
# service's own (an infill prompt's candidate lengths, a constraint and a cache salt go on
# the request; the service applies stop and echo and runs n or best_of samples as rows,
# a best_of line's asking for log-probabilities: row_fields)
PER_REQUEST = frozenset({field.service_name for field in FIELDS.values() if field.per_row}
                        | SERVICE_ONLY)


def engine_fields(params: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for the engine's GenerationConfig: best_of ranks its draws by
    their log-probabilities, so it asks for them."""
    fields = {ENGINE_NAMES.get(name, name): value for name, value in params.items()
              if name not in SERVICE_ONLY}
    return fields | {"logprobs": True} if (params.get("best_of") or 1) > 1 else fields


def row_fields(params: dict[str, Any]) -> dict[str, Any]:
    """A line's own values of the field table's per-row rows, by their engine names, for
    its engine requests' `fields` (those a request carries as its own attribute, the
    seed, go there instead); best_of ranks its draws by their log-probabilities."""
    fields = {ROW_FIELDS[name]: value for name, value in params.items() if name in ROW_FIELDS}
    return fields | {"logprobs": True} if (params.get("best_of") or 1) > 1 else fields


CONTROLS = frozenset(f.name for f in dataclasses.fields(SamplingControls))
ROW_FIELDS = {field.service_name: name for name, field in FIELDS.items()
              if field.per_row and name not in CONTROLS
              and name not in {f.name for f in dataclasses.fields(GenerationRequest)}}


def row_controls(params: dict[str, Any]) -> SamplingControls | None:
    """A line's sampling controls (dinfer_engine/sampling_controls.py) from its parameters
    named as the controls' rows, which ride on its engine requests' `controls`; None when
    it sets none (the engine's config's then)."""
    given = {name: value for name, value in params.items() if name in CONTROLS}
    return SamplingControls.given(given) if given else None


def sample_seeds(params: dict[str, Any], seed_base: int, line: int) -> list[int]:
    """The seed of each of the request's `n` samples: `seed + i`, where `seed` is the
    request's own (the line's, else the job's `--seed`), else `seed_base + line * 128`
    (MAX_SAMPLES): then every sample of every line has a distinct, reproducible seed, and
    no two lines share the noise of any sample."""
    seed = params.get("seed")
    first = seed_base + line * MAX_SAMPLES if seed is None else seed
    return [first + i for i in range(params.get("n", 1))]
