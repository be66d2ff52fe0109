"""Generation parameters as OpenAI / vLLM name them, their checks, and their engine names.

A job carries defaults; any line may override them. `max_tokens` is the engine's
`gen_length`; the diffusion fields keep the engine's own names; `stop` is applied by the
service after generation (the engine has no stop strings)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class InvalidParam(ValueError):
    """A parameter with the wrong type or value; the message names it."""


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidParam(f"{name} must be a positive integer, got {value!r}")
    return value


def _seed(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidParam(f"{name} must be an integer >= 0, got {value!r}")
    return value


def _temperature(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise InvalidParam(f"{name} must be a number >= 0, got {value!r}")
    return float(value)


def _fraction(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise InvalidParam(f"{name} must be a number in (0, 1], got {value!r}")
    return float(value)


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidParam(f"{name} must be an integer >= 0, got {value!r}")
    return value


def _unit(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InvalidParam(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidParam(f"{name} must be true or false, got {value!r}")
    return value


def _choice(*choices: str) -> Callable[[str, Any], str]:
    def check(name: str, value: Any) -> str:
        if value not in choices:
            raise InvalidParam(f"{name} must be one of {', '.join(choices)}; got {value!r}")
        return value

    return check


def _stop(name: str, value: Any) -> list[str]:
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise InvalidParam(f"{name} must be a non-empty string or a list of them, got {value!r}")
    return stops


def _top_k(name: str, value: Any) -> int:
    """vLLM's convention: -1 (or 0) means no limit."""
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise InvalidParam(f"{name} must be a positive integer, or -1 for no limit; "
                           f"got {value!r}")
    return max(value, 0)


def _top_logprobs(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 20:
        raise InvalidParam(f"{name} must be an integer from 0 to 20, got {value!r}")
    return value


def _n(name: str, value: Any) -> int:
    if _positive_int(name, value) > MAX_SAMPLES:
        raise InvalidParam(f"{name} must be at most {MAX_SAMPLES}, got {value!r}")
    return value


MAX_SAMPLES = 128  # OpenAI's limit for n
# the engine's choices (engine/generation_config.py), repeated so that the CLI does not
# import torch; tests/test_decoding_strategies.py checks they agree
DECODERS = ("fixed", "threshold", "hierarchical", "credit")
CACHES = ("none", "prefix", "dual", "vicinity")

CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "max_tokens": _positive_int,
    "block_length": _positive_int,
    "steps": _positive_int,
    "decoder": _choice(*DECODERS),
    "threshold": _fraction,
    "low_threshold": _unit,
    "temperature": _temperature,
    "top_p": _fraction,
    "top_k": _top_k,
    "logprobs": _bool,
    "top_logprobs": _top_logprobs,
    "seed": _seed,
    "cache": _choice(*CACHES),
    "prefix_look": _count,
    "after_look": _count,
    "warmup_steps": _count,
    "smoothing": _bool,
    "cont_weight": _unit,
    "early_stop": _bool,
    "stop": _stop,
    "n": _n,
}
KNOWN = frozenset(CHECKS)
ENGINE_NAMES = {"max_tokens": "gen_length"}
SERVICE_ONLY = {"stop", "n"}


def check_params(raw: dict[str, Any]) -> dict[str, Any]:
    """The parameters in `raw` that are set (not None), checked and normalised."""
    if not raw.keys() <= KNOWN:
        unknown = sorted(set(raw) - KNOWN)
        raise InvalidParam(
            f"unknown parameter(s) {', '.join(unknown)}; supported: {', '.join(CHECKS)}"
        )
    return {name: CHECKS[name](name, value) for name, value in raw.items() if value is not None}


# the parameters that may differ between requests of one engine call (the engine takes a
# seed per prompt; the service applies stop and runs n samples as rows)
PER_REQUEST = ("seed", "stop", "n")


def engine_fields(params: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for the engine's GenerationConfig."""
    return {ENGINE_NAMES.get(name, name): value for name, value in params.items()
            if name not in SERVICE_ONLY}


def sample_seeds(params: dict[str, Any], seed_base: int, line: int) -> list[int]:
    """The seed of each of the request's `n` samples: `seed + i`, where `seed` is the
    request's own (the line's, else the job's `--seed`), else `seed_base + line * 128`
    (MAX_SAMPLES): then every sample of every line has a distinct, reproducible seed, and
    no two lines share the noise of any sample."""
    seed = params.get("seed")
    first = seed_base + line * MAX_SAMPLES if seed is None else seed
    return [first + i for i in range(params.get("n", 1))]
