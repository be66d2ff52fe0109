"""Options shared by `submit` and `run`: the model, the generation defaults, chunking."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from dinfer_batch.config import DEFAULT_CHUNK_SIZE, default_model
from dinfer_batch.errors import UserError
from dinfer_batch.formats.params import CACHES, DECODERS
from dinfer_batch.jobs.ingest import JobSpec
from dinfer_batch.jobs.spec import job_spec as make_job_spec

PARAM_OPTIONS = ("max_tokens", "block_length", "steps", "decoder", "threshold",
                 "temperature", "seed", "cache")


def job_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--model", default=default_model, show_default="models/demo",
                     help="Model directory (LLaDA layout)."),
        click.option("--max-tokens", type=int, help="Answer length in tokens (gen_length)."),
        click.option("--block-length", type=int, help="Tokens per diffusion block."),
        click.option("--steps", type=int, help="Denoising steps for the whole answer."),
        click.option("--decoder", type=click.Choice(DECODERS), help="Which tokens to commit."),
        click.option("--threshold", type=float, help="Confidence for --decoder threshold."),
        click.option("--temperature", type=float, help="0 is greedy."),
        click.option("--seed", type=int, help="Seed for sampling (temperature > 0)."),
        click.option("--cache", type=click.Choice(CACHES), help="KV cache mode."),
        click.option("--chunk-size", type=click.IntRange(min=1), default=DEFAULT_CHUNK_SIZE,
                     show_default=True, help="Requests per queued chunk."),
        click.option("--metadata", multiple=True, metavar="KEY=VALUE",
                     help="Attach metadata to the job (repeatable)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def job_spec(options: dict[str, Any], queue: str) -> JobSpec:
    """The job the command line asks for (UserError on anything wrong)."""
    return make_job_spec(options["model"], {name: options[name] for name in PARAM_OPTIONS},
                         queue=queue, chunk_size=options["chunk_size"],
                         metadata=_metadata(options["metadata"]))


def _metadata(pairs: tuple[str, ...]) -> dict[str, str]:
    metadata = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"--metadata takes KEY=VALUE, got {pair!r}")
        metadata[key] = value
    return metadata
