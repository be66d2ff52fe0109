"""`dinfer-batch model`: what the service knows of a model before any worker loads it."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import click

from dinfer_batch.config import settings
from dinfer_batch.model_info import load_model_info
from dinfer_engine.generation_config import UNIFORM_NOISE_FIELDS

# the settings each decoder reads, shown beside it (dinfer_engine/generation_config.py)
DECODER_FIELDS = {
    "fixed": ("steps",), "threshold": ("threshold",),
    "hierarchical": ("threshold", "low_threshold"), "credit": ("threshold",),
    "editing": ("threshold", "editing_threshold", "max_post_steps", "num_to_transfer",
                "preset"),
}


@click.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True,
              help="Print every default generation setting as JSON.")
def model(name: str | None, as_json: bool) -> None:
    """Show model NAME (a checkpoint directory or a name under DINFER_BATCH_MODEL_DIR;
    default: DINFER_BATCH_MODEL, else the bundled demo): its family, read from its
    config.json, its context length and the decoder a request that sets none gets (the
    family's recommendation, under the checkpoint's generation_config.json). Example:

    \b
        dinfer-batch model demo
    """
    info = load_model_info(name or settings().default_model)
    config = info.default_config()
    if as_json:
        click.echo(json.dumps({"name": info.name, "path": info.path, "family": info.family,
                               "max_context": info.max_context,
                               "defaults": asdict(config)}, indent=2))
        return
    if info.uniform_noise:
        shown_settings = ", ".join(f"{field} {getattr(config, field)}"
                             for field in UNIFORM_NOISE_FIELDS)
        click.echo("\n".join([
            f"model    {info.name} ({info.path})", f"family   {info.family}",
            f"context  {info.max_context} tokens",
            f"canvas   uniform noise ({shown_settings}; {config.gen_length} tokens)"]))
        return
    shown: dict[str, Any] = {field: getattr(config, field)
                             for field in DECODER_FIELDS[config.decoder]}
    shown_settings = ", ".join(f"{field} {value}" for field, value in shown.items()
                         if value is not None)
    click.echo("\n".join([
        f"model    {info.name} ({info.path})",
        f"family   {info.family}",
        f"context  {info.max_context} tokens",
        f"decoder  {config.decoder} ({shown_settings}; blocks of {config.block_length}, "
        f"{config.gen_length} tokens)",
    ]))
