"""Every named choice of the engine, one table per kind: decoders, cache strategies,
iteration smoothing, kernels, presets and model families (docs/adr/030-one-registry-per-choice.md).

Read without torch: the service validates requests and the command line offers its
options from these tables (dinfer_batch/formats/params.py, dinfer_batch/cli/options.py).
An entry names the class that builds it as "module:Class"; only the engine imports it,
when it builds the choice (dinfer_engine/decoding/strategies.py,
dinfer_engine/models/families.py). A new decoder is its file and one line in
DECODERS; tests/engine/test_choices.py builds every entry."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Choice:
    """builds: "module:Class", a class constructed from the ResolvedConfig (a canvas may
    have its own rule for a name: dinfer_engine/canvas/masked.py)."""

    builds: str

    def load(self) -> Any:
        """The class, imported now."""
        return load(self.builds)


def load(reference: str) -> Any:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


DECODERS: dict[str, Choice] = {
    "fixed": Choice("dinfer_engine.decoding.decoders:FixedDecoder"),
    "threshold": Choice("dinfer_engine.decoding.decoders:ThresholdDecoder"),
    "hierarchical": Choice("dinfer_engine.decoding.decoders:HierarchicalDecoder"),
    "credit": Choice("dinfer_engine.decoding.decoders:CreditDecoder"),
    "editing": Choice("dinfer_engine.decoding.editing:EditingDecoder"),
}

# unused by block diffusion, which caches its committed blocks itself
CACHES: dict[str, Choice] = {
    "none": Choice("dinfer_engine.forwards.forward:NoCache"),
    "prefix": Choice("dinfer_engine.forwards.forward:PrefixCache"),
    "dual": Choice("dinfer_engine.forwards.forward:DualCache"),
    "vicinity": Choice("dinfer_engine.forwards.forward:VicinityCache"),
}

# which implementation runs (dinfer_kernels/backend.py dispatches on each):
# dinfer_engine.Engine's kernels
KERNELS = ("auto", "torch", "triton")

# the config's `smoothing` is a switch
SMOOTHING: dict[bool, Choice] = {
    False: Choice("dinfer_engine.forwards.smoothing:NoSmoothing"),
    True: Choice("dinfer_engine.forwards.smoothing:IterationSmoothing"),
}

# LLaDA2.1's decoding modes (dinfer_engine/decoding/editing.py, docs/adr/021-token-editing.md): the
# settings a preset gives the fields its caller leaves unset, above the model's defaults
PRESETS: dict[str, dict[str, Any]] = {
    "speed": {"decoder": "editing", "threshold": 0.5, "editing_threshold": 0.0,
              "max_post_steps": 16, "num_to_transfer": 1},
    "quality": {"decoder": "editing", "threshold": 0.7, "editing_threshold": 0.5,
                "max_post_steps": 16, "num_to_transfer": 1},
}


@dataclass(frozen=True)
class Family:
    name: str  # as users know it
    builds: str  # "module:Class", the DiffusionLM class (dinfer_engine/models/families.py)
    generation_defaults: dict[str, Any] = field(default_factory=dict)  # GenerationConfig
    # fields, under the checkpoint's generation_config.json
    block_causal: bool = False  # block diffusion: a block never sees the text after it
    uniform_noise: bool = False  # DiffusionGemma's canvases (dinfer_engine/canvas/uniform.py)

    def load(self) -> Any:
        """The DiffusionLM class, imported now."""
        return load(self.builds)


FAMILIES: dict[str, Family] = {
    "llada": Family("LLaDA", "dinfer_engine.models.llada:LLaDAModelLM"),
    "llada_moe": Family("LLaDA-MoE", "dinfer_engine.models.llada_moe:LLaDAMoEModelLM"),
    # LLaDA2's published generate: threshold 0.95, blocks of 32, one block's length of
    # steps per block (steps = gen_length)
    "llada2": Family("LLaDA2", "dinfer_engine.models.llada2:LLaDA2MoeModelLM",
                     {"decoder": "threshold", "threshold": 0.95, "block_length": 32},
                     block_causal=True),
    # LLaDA2.1's published generate (dinfer_engine/decoding/editing.py): the same architecture,
    # decoded with token editing, with its defaults
    "llada21": Family("LLaDA2.1", "dinfer_engine.models.llada2:LLaDA21MoeModelLM",
                      {"decoder": "editing", "threshold": 0.95, "editing_threshold": 0.9,
                       "max_post_steps": 16, "num_to_transfer": 1, "block_length": 32},
                      block_causal=True),
    # DiffusionGemma: transformers' global defaults for its generate (the checkpoint's
    # generation_config.json overrides them); docs/adr/027-diffusion-gemma.md
    "diffusion_gemma": Family("DiffusionGemma",
                              "dinfer_engine.models.diffusion_gemma:DiffusionGemmaLM", {
                                  "max_denoising_steps": 48, "entropy_bound": 0.1,
                                  "t_min": 0.4, "t_max": 0.8, "stability_threshold": 1,
                                  "confidence_threshold": 0.005, "gen_length": 256},
                              block_causal=True, uniform_noise=True),
}

# config.json's model_type -> family. LLaDA-MoE's public checkpoint says "llada" (told
# apart by its keys); "llada21_moe" is LLaDA2.1's model_type in dllm's LLaDA2.1 config
MODEL_TYPES: dict[str, str] = {"llada": "llada", "lladamoe": "llada_moe",
                               "llada2_moe": "llada2", "llada21_moe": "llada21",
                               "diffusion_gemma": "diffusion_gemma"}


def family_key(raw: dict[str, Any]) -> str | None:
    """The FAMILIES key of a config.json's fields, or None when no family reads it."""
    key = MODEL_TYPES.get(str(raw.get("model_type")))
    if key == "llada" and raw.get("num_experts") and raw.get("num_hidden_layers"):
        return "llada_moe"
    return key
