"""Options shared by `submit` and `run`: the model, the generation defaults, chunking."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from dinfer_batch.config import DEFAULT_CHUNK_SIZE, default_model
from dinfer_batch.errors import UserError
from dinfer_batch.formats.params import CACHES, DECODERS, InvalidParam, check_params
from dinfer_batch.jobs.ingest import JobSpec
from dinfer_batch.model_info import load_model_info

PARAM_OPTIONS = ("max_tokens", "block_length", "steps", "decoder", "threshold",
                 "low_threshold", "temperature", "seed", "cache", "prefix_look", "after_look",
                 "warmup_steps", "smoothing", "cont_weight")


def job_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--model", default=default_model, show_default="models/demo",
                     help="Model directory (LLaDA layout)."),
        click.option("--max-tokens", type=int, help="Answer length in tokens (gen_length)."),
        click.option("--block-length", type=int, help="Tokens per diffusion block."),
        click.option("--steps", type=int, help="Denoising steps for the whole answer."),
        click.option("--decoder", type=click.Choice(DECODERS), help="Which tokens to commit."),
        click.option("--threshold", type=float,
                     help="Confidence for --decoder threshold, hierarchical, credit."),
        click.option("--low-threshold", type=float,
                     help="Per-run confidence for --decoder hierarchical."),
        click.option("--temperature", type=float, help="0 is greedy."),
        click.option("--seed", type=int, help="Seed for sampling (temperature > 0)."),
        click.option("--cache", type=click.Choice(CACHES), help="KV cache mode."),
        click.option("--prefix-look", type=int,
                     help="Columns before the block recomputed by --cache vicinity."),
        click.option("--after-look", type=int,
                     help="Columns after the block recomputed by --cache vicinity."),
        click.option("--warmup-steps", type=int,
                     help="Full forwards first, for --cache vicinity."),
        click.option("--smoothing/--no-smoothing", default=None,
                     help="dInfer's iteration smoothing."),
        click.option("--cont-weight", type=float, help="Smoothing weight cap."),
        click.option("--chunk-size", type=click.IntRange(min=1), default=DEFAULT_CHUNK_SIZE,
                     show_default=True, help="Requests per queued chunk."),
        click.option("--metadata", multiple=True, metavar="KEY=VALUE",
                     help="Attach metadata to the job (repeatable)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def job_spec(options: dict[str, Any], queue: str) -> JobSpec:
    """Check the options (UserError on anything wrong) and load what the model needs."""
    try:
        params = check_params({name: options[name] for name in PARAM_OPTIONS})
    except InvalidParam as exc:
        raise UserError(f"invalid option: {exc}") from exc
    model = load_model_info(options["model"])
    try:
        answer = model.gen_length(params)
    except ValueError as exc:
        raise UserError(f"invalid generation options: {exc}") from exc
    if answer >= model.max_context:  # else every line would fail alone as too long
        raise UserError(f"invalid generation options: an answer of {answer} tokens leaves no "
                        f"room for a prompt in the model's context of {model.max_context}")
    return JobSpec(model=model, queue=queue, chunk_size=options["chunk_size"], params=params,
                   metadata=_metadata(options["metadata"]))


def _metadata(pairs: tuple[str, ...]) -> dict[str, str]:
    metadata = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--metadata takes KEY=VALUE, got {pair!r}")
        metadata[key] = value
    return metadata
