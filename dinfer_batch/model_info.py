"""What the service needs to know about a model before queueing work for it: that it
exists, its context length, its generation defaults (to check parameters with the engine's
own rules) and its tokenizer (to reject over-long prompts up front). The weights are only
loaded by workers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path, PurePath
from typing import Any

from dinfer_batch.errors import UserError
from dinfer_batch.fastjson import canonical, loads
from dinfer_batch.formats.parameters.ceilings import over_ceiling
from dinfer_batch.formats.parameters.params import SERVICE_ONLY, engine_fields
from dinfer_engine.choices import FAMILIES, family_key
from dinfer_engine.generation_fields import family_defaults
from dinfer_engine.loading.tokenizer import TokenCounter, load_token_counter
from dinfer_engine.models.diffusion_gemma_config import DEFAULT_CANVAS
from dinfer_workers.engine_cache import resolve_config


@dataclass(frozen=True)
class ModelInfo:
    name: str  # what jobs store: relative to DINFER_BATCH_MODEL_DIR when under it
    path: str  # this machine's directory
    max_context: int
    tokens: TokenCounter = field(repr=False)
    vocab_size: int | None = None  # top_k's ceiling (formats/parameters/ceilings.py)
    family: str = "unknown"  # as users know it (dinfer_engine/choices.py), from config.json
    family_key: str | None = None  # its FAMILIES entry, whose capabilities decide a line
    uniform_canvas: int | None = None  # DiffusionGemma's canvas_length (config.json)

    def named(self, model: str) -> bool:
        """Whether a request naming `model` names this one: its name, its directory, or
        the last part of its name (`LLaDA-8B-Instruct` for `GSAI-ML/LLaDA-8B-Instruct`)."""
        return model in (self.name, self.path, self.name.rstrip("/").rsplit("/", 1)[-1])

    def token_counts(self, texts: list[str]) -> list[int]:
        return self.tokens.counts(texts)

    def token_bounds(self, texts: list[str]) -> list[int]:
        """At least as many tokens as each text has, without tokenizing where a bound on
        the count proves it (`TokenCounter.bound_extra`); otherwise counted exactly."""
        extra = self.tokens.bound_extra()
        if extra is None:
            return self.token_counts(texts)
        return [len(text.encode()) + extra for text in texts]

    def gen_length(self, params: dict[str, Any]) -> int:
        """The answer length these parameters give; ValueError as for `config`."""
        return int(self.config(params).gen_length)

    def config(self, params: dict[str, Any]) -> Any:
        """The engine's resolved settings for these parameters; ValueError (from the
        engine's own checks) when they are invalid together, e.g. a block_length that does
        not divide, or when one is past its ceiling on this model
        (formats/parameters/ceilings.py)."""
        config = _resolved(_key(params), self.path)
        problem = over_ceiling(config, self.max_context, self.vocab_size)
        if problem is not None:
            raise ValueError(problem)
        return config

    def canvas_tokens(self, config: Any) -> int:
        """The answer columns one sample decodes under a resolved config: max_tokens
        rounded up to whole blocks, or to whole canvases on DiffusionGemma (ADR 059)."""
        if self.uniform_canvas is not None:
            return -(-config.gen_length // self.uniform_canvas) * self.uniform_canvas
        return int(config.canvas_length)

    def decoder(self, params: dict[str, Any]) -> str:
        """The decoder these parameters get (the model's default included); ValueError as
        for `gen_length`."""
        return str(_resolved(_key(params), self.path).decoder)

    def samples_randomly(self, params: dict[str, Any]) -> bool:
        """Whether these parameters sample (temperature > 0, the model's default included),
        so that the seed matters; ValueError as for `gen_length`."""
        return _resolved(_key(params), self.path).temperature > 0

    def default_config(self) -> Any:
        """The engine's resolved settings for a request that sets none: the family's
        recommendations under the checkpoint's generation_config.json."""
        return _resolved(_key({}), self.path)


def _key(params: dict[str, Any]) -> str:
    """The cache key: the per-request fields (seed, stop, n) are left out, as they change
    neither the length nor sampling and were checked when the request was read; a million
    lines with their own seeds then resolve a handful of configurations, not a million.
    The other per-row fields (log-probabilities, the sampling controls) stay in: the
    resolve checks them against the model (its canvases, its ceilings)."""
    return canonical({name: value for name, value in params.items() if name not in UNREAD})


UNREAD = SERVICE_ONLY | {"seed"}  # what the key leaves out (engine_fields drops the others)


@lru_cache(maxsize=4096)
def _resolved(params_json: str, model: str) -> Any:
    key = family_key(_json(Path(model) / "config.json"))
    return resolve_config(engine_fields(loads(params_json)), _defaults(model), key)


@lru_cache(maxsize=8)
def _defaults(model: str) -> dict[str, Any]:
    """What the engine completes a request with: the family's defaults, under the
    checkpoint's generation_config.json (dinfer_engine.Engine's model_defaults)."""
    key = family_key(_json(Path(model) / "config.json"))
    return {**family_defaults(key), **_json(Path(model) / "generation_config.json")}


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError as exc:
        raise UserError(f"model file {path} is not valid JSON ({exc})") from exc


def model_path(model: str, base: Path) -> Path:
    """This machine's directory for `model`: a name under `base` (DINFER_BATCH_MODEL_DIR)
    when that directory has it, else a path (relative to the working directory)."""
    path = Path(model).expanduser()
    if not path.is_absolute() and (base / path).is_dir():
        return (base / path).resolve()
    return path.resolve()


def model_name(directory: Path, base: Path) -> str:
    """The name a job stores for a model directory: its path relative to `base`
    (DINFER_BATCH_MODEL_DIR) when it lies there (workers on other machines resolve it in
    their own model directory), else its absolute path."""
    if directory.is_relative_to(base.resolve()):
        return directory.relative_to(base.resolve()).as_posix()
    return str(directory)


def public_name(name: str) -> str:
    """A stored model name as clients see it (batch objects, output lines): the name
    relative to `DINFER_BATCH_MODEL_DIR` as it is, and for a model stored by its
    absolute path (one outside that folder) the directory's own name: no server path."""
    return PurePath(name).name if PurePath(name).is_absolute() else name


def load_model_info(model: str, model_dir: Path) -> ModelInfo:
    """`model`: a name under `model_dir` (DINFER_BATCH_MODEL_DIR), or a path."""
    directory = model_path(model, model_dir)
    if not (directory / "config.json").is_file():
        raise UserError(f"unknown model {model!r}: {directory} is not a model directory "
                        f"(no config.json, nor under DINFER_BATCH_MODEL_DIR={model_dir})")
    config = _json(directory / "config.json")
    key = family_key(config)
    nested = config.get("text_config")  # DiffusionGemma nests its text stack's fields
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    try:
        tokens = load_token_counter(directory)
    except ValueError as exc:
        raise UserError(f"model {model!r}: {exc}") from exc
    return ModelInfo(
        name=model_name(directory, model_dir),
        path=str(directory),
        max_context=int(text.get("max_sequence_length") or text.get(
            "max_position_embeddings") or 4096),
        tokens=tokens,
        vocab_size=text.get("vocab_size"),
        family=FAMILIES[key].name if key else "unknown",
        family_key=key,
        uniform_canvas=int(config.get("canvas_length", DEFAULT_CANVAS))
        if key is not None and FAMILIES[key].canvas == "uniform" else None,
    )
