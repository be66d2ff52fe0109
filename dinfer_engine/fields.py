"""What a row of the generation field table says (dinfer_engine/generation_fields.py,
docs/adr/046-one-field-table.md): a parameter's check, default, help, ceiling, and who
reads it. Read without torch: the service derives its checks, ceilings and options from
the same rows.

A check is a kind (Integer, Number, Flag, OneOf) holding its bounds; the engine raises
its own wording here (`engine_check`), the service words the same bounds for its users
(dinfer_batch/formats/parameters/params.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MASKED = ("masked", "block")  # the masked-diffusion canvases (dinfer_engine/choices.py)
EVERY_CANVAS = (*MASKED, "uniform")


@dataclass(frozen=True)
class Integer:
    minimum: int
    maximum: int | None = None

    def engine_check(self, name: str, value: Any) -> None:
        require_int(name, value, self.minimum)
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"{name} must be <= {self.maximum}, got {value}")

    def words(self) -> str:
        """The accepted values, as the service's messages say them."""
        if self.maximum is not None:
            return f"an integer from {self.minimum} to {self.maximum}"
        return "a positive integer" if self.minimum == 1 else f"an integer >= {self.minimum}"


@dataclass(frozen=True)
class Number:
    """A number within bounds: `low` (open: excluded) and `high` (None: unbounded)."""

    low: float
    high: float | None = None
    low_open: bool = False

    def contains(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        return above and (self.high is None or value <= self.high)

    def words(self) -> str:
        """'in (0, 1]', '>= 0', ...: the bounds as both layers' messages say them."""
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"

    def engine_check(self, name: str, value: Any) -> None:
        require_number(name, value)
        if not self.contains(value):
            raise ValueError(f"{name} must be {self.words()}, got {value}")


@dataclass(frozen=True)
class Flag:
    def engine_check(self, name: str, value: Any) -> None:
        require_bool(name, value)


@dataclass(frozen=True)
class OneOf:
    """One of a registry's names (dinfer_engine/choices.py)."""

    choices: tuple[str, ...]

    def engine_check(self, name: str, value: Any) -> None:
        require_choice(name, value, self.choices)


@dataclass(frozen=True)
class TokenBias:
    """OpenAI's `logit_bias`: an object mapping token ids, written as decimal strings
    (JSON keys; ints too for the engine's callers), to a bias in [-limit, limit], with at
    most `entries` entries (dinfer_engine/sampling_controls.py reads it)."""

    limit: float
    entries: int

    def words(self) -> str:
        return (f"an object of at most {self.entries} entries mapping token ids (decimal "
                f"strings) to numbers from {-self.limit:g} to {self.limit:g}")

    def problem(self, name: str, value: Any) -> str | None:
        """What is wrong with `value`, the field called `name`; None when it is valid."""
        if not isinstance(value, Mapping):
            return f"{name} must be {self.words()}"
        if len(value) > self.entries:
            return (f"{name} must have at most {self.entries} entries (OpenAI's limit), got "
                    f"{len(value)}")
        for key, bias in value.items():
            if token_id(key) is None:
                return (f"{name} keys must be token ids (decimal strings of integers >= 0), "
                        f"got {key!r}")
            if isinstance(bias, bool) or not isinstance(bias, int | float) \
                    or not -self.limit <= bias <= self.limit:
                return f"{name}[{key!r}] must be a number from {-self.limit:g} to {self.limit:g}"
        return None

    def engine_check(self, name: str, value: Any) -> None:
        problem = self.problem(name, value)
        if problem is not None:
            raise ValueError(problem)


def token_id(key: Any) -> int | None:
    """A logit_bias key as a token id: an int >= 0, or its canonical decimal string
    ("42", not "042" nor "+42", so no two keys name one token); None otherwise."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key if key >= 0 else None
    if isinstance(key, str) and key.isascii() and key.isdigit() and str(int(key)) == key:
        return int(key)
    return None


Check = Integer | Number | Flag | OneOf | TokenBias


@dataclass(frozen=True)
class Ceiling:
    """What bounds a parameter's cost (docs/adr/017-tenants.md), in words for the docs and
    the message. bound: "context" (the model's length), "vocabulary", or the field whose
    resolved value bounds it; None: bounded by its check, or with the prompt.
    per_decoder: applies only while one of the field's decoders runs."""

    why: str
    bound: str | None = None
    per_decoder: bool = False


@dataclass(frozen=True)
class Field:
    """One generation parameter. `name` is filled from the table's attribute."""

    check: Check
    default: Any
    help: str | None  # the command line's --help; None: no option
    ceiling: Ceiling | None = None  # None: not a number (nothing to bound)
    family: Mapping[str, Any] = field(default_factory=dict)  # family key -> its default
    canvases: tuple[str, ...] = EVERY_CANVAS  # the canvases that read it
    decoders: tuple[str, ...] = ()  # the decoders it tunes (dinfer-batch model shows it)
    spelt: str | None = None  # the service's name, where it differs (max_tokens)
    request: bool = True  # a request may set it (else the engine's caller only)
    nullable: bool = False  # None is a value (unset seed, no preset)
    # may differ between the requests of one engine call: each request carries its own
    # (dinfer_engine.request.GenerationRequest), so lines differing in it share a batch
    per_row: bool = False
    name: str = ""

    @property
    def service_name(self) -> str:
        return self.spelt or self.name


def row(check: Check, default: Any, help: str | None, **rest: Any) -> Any:
    """A table attribute: its default, the Field in its metadata."""
    return dataclasses.field(default=default, metadata={"row": Field(check, default, help,
                                                                      **rest)})


def rows_of(table: type) -> dict[str, Field]:
    """The Fields of a table class, by name, in its order."""
    return {f.name: dataclasses.replace(f.metadata["row"], name=f.name)
            for f in dataclasses.fields(table)}


def require_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def require_number(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")


def require_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")


def require_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(choices)}")
