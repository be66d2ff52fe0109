"""The generation field table (dinfer_engine/generation_fields.py) and what is derived
from it, and the one request check (dinfer_engine/request_check.py) against the
registry's capabilities."""

from __future__ import annotations

import dataclasses

import pytest

from dinfer_batch.cli.submit import submit
from dinfer_batch.formats.parameters import ceilings, params
from dinfer_batch.jobs.create import PARAM_OPTIONS
from dinfer_engine.choices import DECODERS, FAMILIES
from dinfer_engine.generation_config import GenerationConfig, ResolvedConfig
from dinfer_engine.generation_fields import FIELDS
from dinfer_engine.request_check import request_problem


def test_every_row_is_a_field_of_both_configs_and_of_the_service():
    names = list(FIELDS)
    assert [f.name for f in dataclasses.fields(ResolvedConfig)] == names
    assert [f.name for f in dataclasses.fields(GenerationConfig)] == names
    assert all(getattr(GenerationConfig(), name) is None for name in names)
    requested = {field.service_name for field in FIELDS.values() if field.request}
    assert requested <= set(params.CHECKS)
    assert {f.service_name for f in FIELDS.values() if f.ceiling} <= set(ceilings.CEILINGS) \
        | {f.service_name for f in FIELDS.values() if not f.request}
    offered = {option.name for option in submit.params}
    assert {f.service_name for f in FIELDS.values() if f.help} <= offered
    assert set(PARAM_OPTIONS) <= offered


@pytest.mark.parametrize("name", [name for name, f in FIELDS.items() if f.request])
def test_the_engine_and_the_service_refuse_the_same_values(name):
    """A value the engine's check refuses, the service's refuses too (its own words)."""
    for value in ("x", -2, 1.5, 10**6, True):
        try:
            FIELDS[name].check.engine_check(name, value)
        except ValueError:
            with pytest.raises(params.InvalidParam, match=FIELDS[name].service_name):
                params.check_params({FIELDS[name].service_name: value})


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_request_check_follows_the_capabilities(family):
    canvas = FAMILIES[family].canvas_choice
    for name, decoder in DECODERS.items():
        assert request_problem(family, name) is None
        gaps = request_problem(family, name, infill=True)
        assert (gaps is None) is (canvas.fills_in and not decoder.rewrites)
        constrained = request_problem(family, name, constrained=True)
        assert (constrained is None) is not decoder.rewrites
    both = request_problem(family, "fixed", infill=True, constrained=True,
                           infill_name="infill (suffix)")
    assert both is not None and "infill (suffix)" in both
