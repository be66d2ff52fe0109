"""Generation settings: what the caller asks for, completed from the model's
generation_config.json, the family's defaults and then the table's, and validated; the
fields and their checks are the rows of dinfer_engine/generation_fields.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dinfer_engine.choices import FAMILIES, PRESETS, Family
from dinfer_engine.fields import require_choice
from dinfer_engine.generation_fields import FIELDS, ResolvedConfig

__all__ = ["ENGINE_DEFAULTS", "FIELDS", "GenerationConfig", "ResolvedConfig", "flat_defaults",
           "for_request", "require_choice", "validate"]

ENGINE_DEFAULTS: dict[str, Any] = {name: field.default for name, field in FIELDS.items()}
# a preset's caller may leave the decoder unset or name the preset's own
PRESET_DECODERS = tuple({preset["decoder"] for preset in PRESETS.values()})


class GenerationConfig:
    """What a caller asks for: any field of ResolvedConfig (dinfer_engine/generation_fields.py),
    each None unless set. A field left None takes generation_config.json's value, then
    the family's default, then the table's."""

    if TYPE_CHECKING:
        def __init__(self, **fields: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

    def resolve(self, model_defaults: dict[str, Any], family: str | None = None
                ) -> ResolvedConfig:
        """family: the model's FAMILIES key (dinfer_engine/choices.py); a family whose
        canvas has strict_fields (DiffusionGemma's) refuses the fields it does not read
        (strict_config). Every field filled (caller, then model_defaults, then the
        table's default) and checked; raises ValueError naming the offending field. One
        coupling: a model's default `steps` belongs to its default gen_length, so a caller
        who sets gen_length but not steps gets one step per token of the canvas (gen_length
        rounded up to whole blocks, ADR 059; one token per step, as LLaDA's default). A
        preset (the caller's; else the model's, unless the caller chose another decoder)
        fills the fields the caller left unset before the model's defaults do."""
        if family is not None and FAMILIES[family].canvas_choice.strict_fields:
            return strict_config(self, FAMILIES[family]).resolve(flat_defaults(model_defaults))
        preset = self.preset
        if preset is None and self.decoder in (None, *PRESET_DECODERS):
            preset = model_defaults.get("preset")
        if preset is not None:
            require_choice("preset", preset, tuple(PRESETS))
            if self.decoder not in (None, PRESETS[preset]["decoder"]):
                raise ValueError(f"preset {preset!r} is the {PRESETS[preset]['decoder']} "
                                 f"decoder's; got decoder {self.decoder!r}")
        values = {}
        for name in FIELDS:
            value = getattr(self, name)
            if value is None and preset is not None:
                value = PRESETS[preset].get(name)
            if value is None:
                value = model_defaults.get(name, ENGINE_DEFAULTS[name])
            values[name] = value
        values["preset"] = preset
        if self.steps is None and (self.gen_length is not None or values["steps"] is None):
            blocks = -(-values["gen_length"] // values["block_length"])
            values["steps"] = blocks * values["block_length"]
        validate(values)
        return ResolvedConfig(**values)


# GenerationConfig's fields are the table's, each defaulting to None: a frozen dataclass
# made here, so that a new row needs no line in it
GenerationConfig.__annotations__ = {name: "Any" for name in FIELDS}
for _name in FIELDS:
    setattr(GenerationConfig, _name, None)
dataclass(frozen=True)(GenerationConfig)


def for_request(config: ResolvedConfig, fields: Mapping[str, Any]) -> ResolvedConfig:
    """The config one request reads: the call's, with the request's own values of per-row
    fields (dinfer_engine.request.GenerationRequest.fields); ValueError naming a field
    that may not differ within a call, or a value its row's check refuses."""
    if not fields:
        return config
    for name in fields:
        if name not in FIELDS or not FIELDS[name].per_row:
            raise ValueError(f"{name} cannot differ between the requests of one call; "
                             "set it in the GenerationConfig")
    values = dataclasses.asdict(config) | dict(fields)
    validate(values)
    return ResolvedConfig(**values)


def strict_config(config: GenerationConfig, family: Family) -> GenerationConfig:
    """The caller's config for a canvas that reads only its own fields: ValueError naming
    a field it sets that the canvas does not read; blocks of one token so the masked
    fields' checks pass."""
    own = [name for name, field in FIELDS.items() if field.canvases == (family.canvas,)]
    for name, field in FIELDS.items():
        value = getattr(config, name)
        if family.canvas not in field.canvases and value is not None \
                and value != field.default:
            raise ValueError(f"{name} does not apply to {family.name} ({family.canvas} "
                             f"canvases); its fields are {', '.join(own)}")
    kept = {name: getattr(config, name) for name in FIELDS}
    return GenerationConfig(**(kept | {"block_length": 1, "steps": None}))


def flat_defaults(raw: dict[str, Any]) -> dict[str, Any]:
    """generation_config.json's fields as GenerationConfig names them:
    sampler_config.entropy_bound becomes entropy_bound, max_new_tokens gen_length (the
    checkpoint's, so above the family's flat defaults)."""
    defaults = dict(raw)
    sampler = defaults.pop("sampler_config", None)
    if isinstance(sampler, dict) and "entropy_bound" in sampler:
        defaults["entropy_bound"] = sampler["entropy_bound"]
    if defaults.get("max_new_tokens") is not None:
        defaults["gen_length"] = defaults["max_new_tokens"]
    return defaults


def validate(values: dict[str, Any]) -> None:
    """Check a complete set of GenerationConfig values, each by its row's check, then
    the rules between fields; ValueError naming the field."""
    for name, field in FIELDS.items():
        if not (field.nullable and values[name] is None):
            field.check.engine_check(name, values[name])
    if not values["t_min"] < values["t_max"]:
        raise ValueError(f"t_min and t_max must satisfy 0 <= t_min < t_max, got "
                         f"t_min={values['t_min']}, t_max={values['t_max']}")
    # gen_length is an upper bound: the canvas is whole blocks (ADR 059)
    blocks = -(-values["gen_length"] // values["block_length"])
    if values["steps"] % blocks:
        raise ValueError(f"steps={values['steps']} must be a multiple of the number of "
                         f"blocks ({blocks}: gen_length={values['gen_length']} rounded up to "
                         f"blocks of block_length={values['block_length']})")
