"""What the service needs to know about a model before queueing work for it: that it
exists, its context length, its generation defaults (to check parameters with the engine's
own rules) and its tokenizer (to reject over-long prompts up front). The weights are only
loaded by workers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from dinfer_batch.errors import UserError
from dinfer_batch.formats.params import engine_fields
from workers.engines import resolve_config


@dataclass(frozen=True)
class ModelInfo:
    path: str
    max_context: int
    tokenizer: Any = field(repr=False)

    def token_counts(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.tokenizer(texts)["input_ids"]]

    def token_bounds(self, texts: list[str]) -> list[int]:
        """At least as many tokens as each text has, without tokenizing where that can be
        proven: with no normaliser (nothing rewrites the text), every token of a BPE,
        Unigram or WordPiece model covers at least one byte of it, so a text has at most
        its UTF-8 length in tokens, plus one (a prepended word marker) plus the special
        tokens around it. Other tokenizers are counted exactly."""
        extra = _free_bound_extra(self.tokenizer)
        if extra is None:
            return self.token_counts(texts)
        return [len(text.encode()) + extra for text in texts]

    def gen_length(self, params: dict[str, Any]) -> int:
        """The answer length these parameters give; ValueError (from the engine's own
        checks) when they are invalid together, e.g. a block_length that does not divide.
        The per-request fields (seed, stop, n) are left out of the cache key: they do not
        change the length, and their own checks were made when the request was read."""
        key = tuple(sorted((name, value) for name, value in params.items()
                           if name not in PER_REQUEST))
        return _gen_length(key, self.path)


PER_REQUEST = ("seed", "stop", "n")


@lru_cache(maxsize=4096)
def _gen_length(params: tuple[tuple[str, Any], ...], model: str) -> int:
    return resolve_config(engine_fields(dict(params)), _defaults(model)).gen_length


@lru_cache(maxsize=8)
def _defaults(model: str) -> dict[str, Any]:
    return _json(Path(model) / "generation_config.json")


def _free_bound_extra(tokenizer: Any) -> int | None:
    """Tokens a text may have beyond its UTF-8 length, or None when no bound is known."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or backend.normalizer is not None:
        return None
    return 1 + tokenizer.num_special_tokens_to_add()


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError as exc:
        raise UserError(f"model file {path} is not valid JSON ({exc})") from exc


def load_model_info(model: str) -> ModelInfo:
    directory = Path(model).expanduser().resolve()
    if not (directory / "config.json").is_file():
        raise UserError(
            f"unknown model {model!r}: {directory} is not a model directory (no config.json)"
        )
    config = _json(directory / "config.json")
    from engine.tokenizer import load_tokenizer

    try:
        tokenizer = load_tokenizer(directory)
    except ValueError as exc:
        raise UserError(f"model {model!r}: {exc}") from exc
    return ModelInfo(
        path=str(directory),
        max_context=int(config.get("max_sequence_length") or config.get(
            "max_position_embeddings") or 4096),
        tokenizer=tokenizer,
    )
