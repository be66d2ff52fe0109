"""`dinfer-batch model`: what the service knows of a model before any worker loads it."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import click

from dinfer_batch.config import Settings
from dinfer_batch.model_info import load_model_info
from dinfer_engine.choices import FAMILIES
from dinfer_engine.generation_fields import FIELDS


@click.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True,
              help="Print every default generation setting as JSON.")
@click.pass_obj
def model(config: Settings, name: str | None, as_json: bool) -> None:
    """Show model NAME (a checkpoint directory or a name under DINFER_BATCH_MODEL_DIR;
    default: DINFER_BATCH_MODEL, else the bundled demo): its family, read from its
    config.json, its context length and the decoder a request that sets none gets (the
    family's recommendation, under the checkpoint's generation_config.json). Example:

    \b
        dinfer-batch model demo
    """
    info = load_model_info(name or config.default_model, config.model_dir)
    defaults = info.default_config()
    if as_json:
        click.echo(json.dumps({"name": info.name, "path": info.path, "family": info.family,
                               "max_context": info.max_context,
                               "defaults": asdict(defaults)}, indent=2))
        return
    canvas = FAMILIES[info.family_key].canvas if info.family_key else "masked"
    head = [f"model    {info.name} ({info.path})", f"family   {info.family}",
            f"context  {info.max_context} tokens"]
    if canvas not in FIELDS["decoder"].canvases:
        # a canvas without decoders: the fields that are its own
        own = [name for name, field in FIELDS.items() if field.canvases == (canvas,)]
        click.echo("\n".join([*head, f"canvas   {canvas} ({_settings(defaults, own)}; "
                                     f"{defaults.gen_length} tokens)"]))
        return
    tuned = [name for name, field in FIELDS.items() if defaults.decoder in field.decoders]
    click.echo("\n".join([
        *head, f"decoder  {defaults.decoder} ({_settings(defaults, tuned)}; blocks of "
               f"{defaults.block_length}, {defaults.gen_length} tokens)"]))


def _settings(config: Any, names: list[str]) -> str:
    """'name value, ...' for the fields that are set."""
    return ", ".join(f"{name} {getattr(config, name)}" for name in names
                     if getattr(config, name) is not None)
