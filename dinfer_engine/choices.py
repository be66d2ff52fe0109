"""Every named choice of the engine, one table per kind: decoders, cache strategies,
iteration smoothing, kernels, presets, canvases and model families, each entry with its
capabilities (docs/adr/030-one-registry-per-choice.md, docs/adr/046-one-field-table.md).

Read without torch: the service validates requests and the command line offers its
options from these tables (dinfer_batch/formats/parameters/params.py, dinfer_batch/cli/options.py).
An entry names the class that builds it as "module:Class"; only the engine imports it,
when it builds the choice (dinfer_engine/decoding/strategies.py,
dinfer_engine/models/families.py). A new decoder is its file and one line in
DECODERS; tests/engine/test_choices.py builds every entry."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
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


@dataclass(frozen=True)
class DecoderChoice(Choice):
    """rewrites: it rewrites tokens it has committed (token editing), so it cannot keep
    given text (infill) or a constraint's walk, and spends post-steps on a finished
    block (dinfer_batch/formats/lines/cost.py)."""

    rewrites: bool = False


# LLaDA2.1's token editing (docs/adr/021-token-editing.md): its name, spelt here only
EDITING = "editing"

DECODERS: dict[str, DecoderChoice] = {
    "fixed": DecoderChoice("dinfer_engine.decoding.decoders:FixedDecoder"),
    "threshold": DecoderChoice("dinfer_engine.decoding.decoders:ThresholdDecoder"),
    "hierarchical": DecoderChoice("dinfer_engine.decoding.decoders:HierarchicalDecoder"),
    "credit": DecoderChoice("dinfer_engine.decoding.decoders:CreditDecoder"),
    EDITING: DecoderChoice("dinfer_engine.decoding.editing:EditingDecoder", rewrites=True),
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
    "speed": {"decoder": EDITING, "threshold": 0.5, "editing_threshold": 0.0,
              "max_post_steps": 16, "num_to_transfer": 1},
    "quality": {"decoder": EDITING, "threshold": 0.7, "editing_threshold": 0.5,
                "max_post_steps": 16, "num_to_transfer": 1},
}


@dataclass(frozen=True)
class Canvas(Choice):
    """What a row's answer region starts as and how its blocks are decoded (builds: the
    class; dinfer_engine/canvas/). infill: the class for rows given text after their
    gaps, where the canvas fills in (None: it cannot). Every canvas takes constraints
    (structured outputs, ADR 043). strict_fields: a request that sets a field
    this canvas does not read (dinfer_engine/generation_fields.py) is refused, not
    ignored. samples: every row draws from its generator, whatever the temperature."""

    infill: str | None = None
    strict_fields: bool = False
    samples: bool = False

    @property
    def fills_in(self) -> bool:
        return self.infill is not None


CANVASES: dict[str, Canvas] = {
    "masked": Canvas("dinfer_engine.canvas.masked:MaskCanvas",
                     infill="dinfer_engine.canvas.infill:InfillCanvas"),
    "block": Canvas("dinfer_engine.canvas.masked:BlockCanvas"),
    # constrained rows commit their done canvases' witnesses (ADR 043)
    "uniform": Canvas("dinfer_engine.canvas.uniform:UniformCanvas",
                      strict_fields=True, samples=True),
}


@dataclass(frozen=True)
class Family:
    """A model family: its name as users know it, the DiffusionLM class that builds it
    ("module:Class", dinfer_engine/models/families.py), the generation loop that runs it
    ("module:Class", an implementation of dinfer_engine/loop.py's contract, which
    loop.run drives) and its canvas (CANVASES, the run's canvas that loop holds).
    block_causal: a block never sees the text after it (committed blocks are cached,
    and shared through the prefix cache). Its recommended settings are the `family`
    column of dinfer_engine/generation_fields.py."""

    name: str
    builds: str
    loop: str = "dinfer_engine.generation:MaskedLoop"
    canvas: str = "masked"
    block_causal: bool = False

    def load(self) -> Any:
        """The DiffusionLM class, imported now."""
        return load(self.builds)

    def load_loop(self) -> Any:
        """The generation loop's class (dinfer_engine/loop.py's contract), imported now."""
        return load(self.loop)

    @property
    def canvas_choice(self) -> Canvas:
        return CANVASES[self.canvas]


FAMILIES: dict[str, Family] = {
    "llada": Family("LLaDA", "dinfer_engine.models.llada:LLaDAModelLM"),
    "llada_moe": Family("LLaDA-MoE", "dinfer_engine.models.llada_moe:LLaDAMoEModelLM"),
    "llada2": Family("LLaDA2", "dinfer_engine.models.llada2:LLaDA2MoeModelLM",
                     canvas="block", block_causal=True),
    # the same architecture, decoded with token editing (dinfer_engine/decoding/editing.py)
    "llada21": Family("LLaDA2.1", "dinfer_engine.models.llada2:LLaDA21MoeModelLM",
                      canvas="block", block_causal=True),
    # docs/adr/027-diffusion-gemma.md
    "diffusion_gemma": Family("DiffusionGemma",
                              "dinfer_engine.models.diffusion_gemma:DiffusionGemmaLM",
                              loop="dinfer_engine.uniform_generation:UniformLoop",
                              canvas="uniform",
                              block_causal=True),
}

# config.json's model_type -> family. LLaDA-MoE's public checkpoint says "llada" (told
# apart by its keys); "llada21_moe" is LLaDA2.1's model_type in dllm's LLaDA2.1 config
MODEL_TYPES: dict[str, str] = {"llada": "llada", "lladamoe": "llada_moe",
                               "llada2_moe": "llada2", "llada21_moe": "llada21",
                               "diffusion_gemma": "diffusion_gemma"}


def key_of_class(cls: type) -> str | None:
    """The FAMILIES key whose entry builds `cls` (or the nearest class it derives from)."""
    built = {family.builds: key for key, family in FAMILIES.items()}
    for klass in cls.__mro__:
        key = built.get(f"{klass.__module__}:{klass.__qualname__}")
        if key is not None:
            return key
    return None


def family_key(raw: dict[str, Any]) -> str | None:
    """The FAMILIES key of a config.json's fields, or None when no family reads it."""
    key = MODEL_TYPES.get(str(raw.get("model_type")))
    if key == "llada" and raw.get("num_experts") and raw.get("num_hidden_layers"):
        return "llada_moe"
    return key
