"""The registry of the engine's choices (dinfer_engine/choices.py): every entry builds what it
names, and the service reads the tables without importing torch."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import torch

from dinfer_batch.formats.parameters import params
from dinfer_engine import Engine, GenerationConfig, choices
from dinfer_engine.canvas.masked import BlockCanvas, MaskCanvas
from dinfer_engine.choices import load
from dinfer_engine.decoding.decoders import BlockThresholdDecoder, Decoder, ThresholdDecoder
from dinfer_engine.decoding.strategies import Strategies
from dinfer_engine.generation_fields import FIELDS, family_defaults
from dinfer_engine.models.base import DiffusionLM
from dinfer_engine.models.families import family_of
from dinfer_kernels import backend


@pytest.mark.parametrize("canvas", [MaskCanvas, BlockCanvas])
@pytest.mark.parametrize("name", list(choices.DECODERS))
def test_every_decoder_builds_from_its_entry(name, canvas):
    config = GenerationConfig(decoder=name).resolve({})
    decoder = Strategies.from_config(config, canvas.decoders).decoder
    assert isinstance(decoder, Decoder)
    assert type(decoder) is canvas.decoders.get(name, choices.DECODERS[name].load())
    assert params.check_params({"decoder": name}) == {"decoder": name}


def test_block_diffusion_has_its_own_threshold_rule():
    config = GenerationConfig(decoder="threshold").resolve({})
    assert type(Strategies.from_config(config, MaskCanvas.decoders).decoder) is ThresholdDecoder
    assert (type(Strategies.from_config(config, BlockCanvas.decoders).decoder)
            is BlockThresholdDecoder)


@pytest.mark.parametrize("name", list(choices.CACHES))
def test_every_cache_builds_from_its_entry(name):
    config = GenerationConfig(cache=name, prefix_look=3, after_look=5).resolve({})
    cache = Strategies.from_config(config).cache
    assert type(cache) is choices.CACHES[name].load()
    assert cache.reserve(16, 8) == {"none": 0, "prefix": 16, "dual": 8, "vicinity": 16}[name]
    assert params.check_params({"cache": name}) == {"cache": name}


@pytest.mark.parametrize("on", [False, True])
def test_both_smoothings_build_from_their_entries(on):
    config = GenerationConfig(smoothing=on, threshold=0.8).resolve({})
    strategies = Strategies.from_config(config)
    assert type(strategies.smoothing) is choices.SMOOTHING[on].load()
    assert strategies.smoothing.base_threshold == 0.8
    assert strategies.needs_logits is on


@pytest.mark.parametrize("name", list(choices.PRESETS))
def test_every_preset_resolves_to_its_fields(name):
    resolved = GenerationConfig(preset=name).resolve({})
    fields = choices.PRESETS[name]
    assert {field: getattr(resolved, field) for field in fields} == fields
    assert fields["decoder"] in choices.DECODERS
    assert params.check_params({"preset": name}) == {"preset": name}


@pytest.mark.parametrize("key", list(choices.FAMILIES))
def test_every_family_builds_its_class(key):
    family = choices.FAMILIES[key]
    model_type = next(t for t, k in choices.MODEL_TYPES.items() if k == key)
    raw: dict[str, Any] = {"model_type": model_type}
    if key == "llada_moe":  # LLaDA-MoE's checkpoint says "llada", told apart by its keys
        raw = {"model_type": "llada", "num_experts": 4, "num_hidden_layers": 2}
    cls = family_of(raw)
    assert cls is family.load() and cls is not None and issubclass(cls, DiffusionLM)
    assert choices.key_of_class(cls) == key  # a model finds its entry, flags and all
    assert callable(family.load_loop()) and family.canvas in choices.CANVASES


@pytest.mark.parametrize("name", list(choices.CANVASES))
def test_every_canvas_builds_from_its_entry(name):
    canvas = choices.CANVASES[name]
    assert isinstance(canvas.load(), type)
    assert canvas.fills_in is (canvas.infill is not None)
    if canvas.infill is not None:
        assert issubclass(load(canvas.infill), canvas.load())


def test_every_family_default_and_preset_names_a_field_its_canvas_reads():
    for key, family in choices.FAMILIES.items():
        for name in family_defaults(key):
            assert family.canvas in FIELDS[name].canvases, (key, name)
    for preset in choices.PRESETS.values():
        assert set(preset) <= set(FIELDS)


def test_the_service_reads_the_choices_without_torch():
    code = ("import sys, dinfer_batch.formats.parameters.params, dinfer_batch.cli, "
            "dinfer_engine.choices, dinfer_engine.request_check, "
            "dinfer_batch.formats.parameters.ceilings; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_kernel_choice_dispatches_and_the_engine_refuses_others(tiny_checkpoint,
                                                                      monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    for choice in choices.KERNELS:
        with backend.choosing(choice):
            if choice == "triton":  # on CPU tensors only through Triton's interpreter
                with pytest.raises(RuntimeError, match="triton"):
                    backend.use_triton(cpu)
            else:
                assert backend.use_triton(cpu) is False
    with pytest.raises(ValueError, match="unknown kernels 'cuda'; choose one of auto"):
        Engine.from_pretrained(tiny_checkpoint, kernels="cuda")
