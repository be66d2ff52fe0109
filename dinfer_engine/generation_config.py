"""Generation settings: what the caller asks for, completed from the model's
generation_config.json and then the engine defaults, and validated."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from dinfer_engine.choices import CACHES, DECODERS, PRESETS

MAX_TOP_LOGPROBS = 20

ENGINE_DEFAULTS: dict[str, Any] = {
    "gen_length": 128,
    "block_length": 32,
    "decoder": "fixed",
    "steps": None,  # None: gen_length, i.e. one token per step as in LLaDA's examples
    "threshold": 0.9,
    "low_threshold": 0.4,
    "editing_threshold": 0.9,
    "max_post_steps": 16,
    "num_to_transfer": 1,
    "preset": None,
    "temperature": 0.0,
    "top_k": 0,
    "top_p": 1.0,
    "logprobs": False,
    "top_logprobs": 0,
    "seed": None,
    "cache": "none",
    "prefix_look": 16,
    "after_look": 16,
    "warmup_steps": 4,
    "smoothing": False,
    "cont_weight": 0.3,
    "early_stop": True,
    "chat": False,
    "max_batch_size": 64,
    "max_batch_tokens": 65536,
    # uniform-noise block diffusion (DiffusionGemma; dinfer_engine/canvas/uniform.py): transformers'
    # defaults for its generate
    "max_denoising_steps": 48,
    "entropy_bound": 0.1,
    "t_min": 0.4,
    "t_max": 0.8,
    "stability_threshold": 1,
    "confidence_threshold": 0.005,
}
# the fields only uniform-noise block diffusion reads (named as in DiffusionGemma's
# generation_config.json, entropy_bound being its sampler_config.entropy_bound)
UNIFORM_NOISE_FIELDS = ("max_denoising_steps", "entropy_bound", "t_min", "t_max",
                        "stability_threshold", "confidence_threshold")


@dataclass(frozen=True)
class GenerationConfig:
    """Any field left None takes generation_config.json's value, then ENGINE_DEFAULTS.

    gen_length: answer length in tokens. block_length: tokens per semi-autoregressive
    block; must divide gen_length. decoder: "fixed" (LLaDA: steps / blocks iterations per
    block, each committing a linear-schedule number of the most confident tokens; steps
    that would commit nothing, when there are more steps than block tokens, are skipped),
    "threshold" (Fast-dLLM: commit every masked token with confidence >= threshold,
    and at least one, per iteration), "hierarchical" (dInfer: also the best of each run
    of contiguous masks above low_threshold) or "credit" (dInfer: threshold on logits
    boosted by tokens that stay on top) or "editing" (LLaDA2.1: masks above threshold
    become tokens, at least num_to_transfer a step, and tokens already placed in the
    current block are rewritten when the model is more than editing_threshold sure of
    another; once no mask is left, up to max_post_steps more forwards edit the block);
    the rules are in dinfer_engine/decoding/decoders.py and
    dinfer_engine/decoding/editing.py. preset: "speed" or "quality", LLaDA2.1's modes
    (dinfer_engine.choices.PRESETS): the editing decoder with their thresholds,
    for every field the caller leaves unset.
    temperature: 0 is greedy, else Gumbel-max sampling from a generator per sequence
    seeded with `seed`, so a seeded request gives the same tokens whatever else is in
    the batch. top_k (0: all tokens) / top_p (1: all): sample only among the top_k most
    likely tokens, then the nucleus of probability top_p; applied to each position on
    its own, so they keep rows batch-invariant. logprobs: return each answer token's
    log-probability under the model's softmax at the iteration that committed it (a
    diffusion model commits tokens out of order, each seeing the tokens committed before
    it, not a left-to-right prefix), with the top_logprobs most likely tokens at that
    position and iteration. cache: "none" | "prefix" | "dual" | "vicinity" (dual with the
    block's prefix_look / after_look neighbour columns recomputed at every iteration and
    warmup_steps full forwards first; see dinfer_engine/forwards/forward.py); block-diffusion
    models (LLaDA2) ignore it and always cache their committed blocks
    (dinfer_engine/forwards/block_forward.py). smoothing: dInfer's iteration smoothing with weight
    cap cont_weight (dinfer_engine/forwards/smoothing.py). early_stop: stop a sequence once its
    answer has ended at a stop token. chat: apply the tokenizer's chat template when it has
    one. max_batch_size / max_batch_tokens: the budget of rows, and of rows x padded width,
    decoded together. LLaDA2's "threshold", as its published generate: every masked
    token strictly above threshold, and at least the linear schedule's count for the
    step. max_denoising_steps, entropy_bound, t_min, t_max, stability_threshold,
    confidence_threshold: DiffusionGemma's loop (dinfer_engine/canvas/uniform.py; other families
    ignore them).
    """

    gen_length: int | None = None
    block_length: int | None = None
    decoder: str | None = None
    steps: int | None = None
    threshold: float | None = None
    low_threshold: float | None = None
    editing_threshold: float | None = None
    max_post_steps: int | None = None
    num_to_transfer: int | None = None
    preset: str | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    seed: int | None = None
    cache: str | None = None
    prefix_look: int | None = None
    after_look: int | None = None
    warmup_steps: int | None = None
    smoothing: bool | None = None
    cont_weight: float | None = None
    early_stop: bool | None = None
    chat: bool | None = None
    max_batch_size: int | None = None
    max_batch_tokens: int | None = None
    max_denoising_steps: int | None = None
    entropy_bound: float | None = None
    t_min: float | None = None
    t_max: float | None = None
    stability_threshold: int | None = None
    confidence_threshold: float | None = None

    def resolve(self, model_defaults: dict[str, Any], uniform_noise: bool = False
                ) -> ResolvedConfig:
        """uniform_noise: for a uniform-noise family (DiffusionGemma), where the masked-
        diffusion fields are refused (uniform_noise_config). Every field filled (caller,
        then model_defaults, then ENGINE_DEFAULTS) and
        checked; raises ValueError naming the offending field. One coupling: a model's
        default `steps` belongs to its default gen_length, so a caller who sets gen_length
        but not steps gets steps = gen_length (one token per step, as LLaDA's default).
        A preset (the caller's; else the model's, unless the caller chose another decoder)
        fills the fields the caller left unset before the model's defaults do."""
        if uniform_noise:
            return uniform_noise_config(self).resolve(flat_defaults(model_defaults))
        preset = self.preset
        if preset is None and self.decoder in (None, "editing"):
            preset = model_defaults.get("preset")
        if preset is not None:
            require_choice("preset", preset, tuple(PRESETS))
            if self.decoder not in (None, "editing"):
                raise ValueError(f"preset {preset!r} is the editing decoder's; "
                                 f"got decoder {self.decoder!r}")
        values = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None and preset is not None:
                value = PRESETS[preset].get(field.name)
            if value is None:
                value = model_defaults.get(field.name, ENGINE_DEFAULTS[field.name])
            values[field.name] = value
        values["preset"] = preset
        if self.steps is None and (self.gen_length is not None or values["steps"] is None):
            values["steps"] = values["gen_length"]
        validate(values)
        return ResolvedConfig(**values)


@dataclass(frozen=True)
class ResolvedConfig:
    """A GenerationConfig with every field filled and checked (`GenerationConfig.resolve`):
    what the generation loop, the decoders and the strategies read. Only `seed` may stay
    None (unseeded). The fields mean what GenerationConfig's docstring says."""

    gen_length: int
    block_length: int
    decoder: str
    steps: int
    threshold: float
    low_threshold: float
    editing_threshold: float
    max_post_steps: int
    num_to_transfer: int
    preset: str | None
    temperature: float
    top_k: int
    top_p: float
    logprobs: bool
    top_logprobs: int
    seed: int | None
    cache: str
    prefix_look: int
    after_look: int
    warmup_steps: int
    smoothing: bool
    cont_weight: float
    early_stop: bool
    chat: bool
    max_batch_size: int
    max_batch_tokens: int
    max_denoising_steps: int
    entropy_bound: float
    t_min: float
    t_max: float
    stability_threshold: int
    confidence_threshold: float

    @property
    def num_blocks(self) -> int:
        return self.gen_length // self.block_length

    @property
    def steps_per_block(self) -> int:
        return self.steps // self.num_blocks


# the masked-diffusion fields (decoders, caches, blocks, sampling): a caller who sets one
# to anything but its default is refused, naming it
REFUSED = ("block_length", "decoder", "steps", "threshold", "low_threshold",
           "editing_threshold", "max_post_steps", "num_to_transfer", "preset", "cache",
           "prefix_look", "after_look", "warmup_steps", "smoothing", "cont_weight",
           "temperature", "top_k", "top_p", "logprobs", "top_logprobs")


def uniform_noise_config(config: GenerationConfig) -> GenerationConfig:
    """The caller's config for a uniform-noise model: ValueError naming a masked-
    diffusion field it sets; blocks of one token so the masked fields' checks pass."""
    for name in REFUSED:
        value = getattr(config, name)
        if value is not None and value != ENGINE_DEFAULTS[name]:
            raise ValueError(f"{name} does not apply to DiffusionGemma (uniform-noise block "
                             f"diffusion); its fields are {', '.join(UNIFORM_NOISE_FIELDS)}")
    return dataclasses.replace(config, block_length=1, steps=None)


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
    """Check a complete set of GenerationConfig values; ValueError naming the field."""
    for name in ("gen_length", "block_length", "steps", "max_batch_size",
                 "max_batch_tokens"):
        require_int(name, values[name], minimum=1)
    if values["seed"] is not None:
        require_int("seed", values["seed"], minimum=0)
    require_int("top_k", values["top_k"], minimum=0)
    require_bool("logprobs", values["logprobs"])
    require_int("top_logprobs", values["top_logprobs"], minimum=0)
    if values["top_logprobs"] > MAX_TOP_LOGPROBS:
        raise ValueError(f"top_logprobs must be <= {MAX_TOP_LOGPROBS}, "
                         f"got {values['top_logprobs']}")
    require_number("top_p", values["top_p"])
    if not 0 < values["top_p"] <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {values['top_p']}")
    require_choice("decoder", values["decoder"], tuple(DECODERS))
    require_choice("cache", values["cache"], tuple(CACHES))
    for name in ("prefix_look", "after_look", "warmup_steps", "max_post_steps"):
        require_int(name, values[name], minimum=0)
    require_int("num_to_transfer", values["num_to_transfer"], minimum=1)
    if values["preset"] is not None:
        require_choice("preset", values["preset"], tuple(PRESETS))
    for name in ("early_stop", "chat", "smoothing"):
        require_bool(name, values[name])
    for name in ("temperature", "threshold", "low_threshold", "cont_weight",
                 "editing_threshold"):
        require_number(name, values[name])
    if values["temperature"] < 0:
        raise ValueError(f"temperature must be >= 0, got {values['temperature']}")
    if not 0 < values["threshold"] <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {values['threshold']}")
    for name in ("low_threshold", "cont_weight", "editing_threshold"):
        if not 0 <= values[name] <= 1:
            raise ValueError(f"{name} must be in [0, 1], got {values[name]}")
    require_int("max_denoising_steps", values["max_denoising_steps"], minimum=1)
    require_int("stability_threshold", values["stability_threshold"], minimum=0)
    for name in ("entropy_bound", "t_min", "t_max", "confidence_threshold"):
        require_number(name, values[name])
    for name in ("entropy_bound", "confidence_threshold"):
        if values[name] <= 0:
            raise ValueError(f"{name} must be > 0, got {values[name]}")
    if not 0 <= values["t_min"] < values["t_max"]:
        raise ValueError(f"t_min and t_max must satisfy 0 <= t_min < t_max, got "
                         f"t_min={values['t_min']}, t_max={values['t_max']}")
    gen_length, block_length, steps = values["gen_length"], values["block_length"], \
        values["steps"]
    if gen_length % block_length:
        raise ValueError(f"block_length={block_length} must divide gen_length={gen_length}")
    if steps % (gen_length // block_length):
        raise ValueError(f"steps={steps} must be a multiple of the number of blocks "
                         f"(gen_length / block_length = {gen_length // block_length})")


def require_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def require_number(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")


def require_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")


def require_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(choices)}")
