"""The generation field table: one row per parameter (docs/adr/046-one-field-table.md).

Each attribute of ResolvedConfig is a row: its type, its engine default and each
family's (`family`), its check, its ceiling, its --help, the canvases and decoders that
read it. Derived from it: GenerationConfig and its checks (generation_config.py), the
service's parameter checks, ceilings and names (dinfer_batch/formats/parameters/params.py,
ceilings.py), the command line's options (dinfer_batch/cli/options.py) and
`dinfer-batch model`. Adding a parameter is a row here plus the code that reads it.
Read without torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dinfer_engine.choices import CACHES, DECODERS, EDITING, PRESETS
from dinfer_engine.fields import (
    MASKED,
    Ceiling,
    Field,
    Flag,
    Integer,
    Number,
    OneOf,
    TokenBias,
    row,
    rows_of,
)

CONTEXT = "the model's context length"
FREE = "(costs nothing)"
EDITS = (EDITING,)  # the fields only token editing reads
THRESHOLDED = ("threshold", "hierarchical", "credit", EDITING)
UNIFORM = ("uniform",)
BLOCKS = {"llada2": 32, "llada21": 32}  # LLaDA2's published generate: blocks of 32
MAX_BIAS, MAX_BIASED = 100, 1024  # OpenAI's logit_bias: values in [-100, 100], 1,024 ids
PENALTY = Ceiling(f"2 (OpenAI's range) {FREE}")


@dataclass(frozen=True)
class ResolvedConfig:
    """Every field filled and checked (`GenerationConfig.resolve`): what the generation
    loop, the decoders and the strategies read. Only `seed` and `preset` may stay None.

    decoder: "fixed" (LLaDA: steps / blocks iterations per block, each committing a
    linear-schedule number of the most confident tokens; steps that would commit
    nothing are skipped), "threshold" (Fast-dLLM: every masked token with confidence >=
    threshold, and at least one, per iteration; LLaDA2's: strictly above, and at least
    the linear schedule's count), "hierarchical" (dInfer: also the best of each run of
    contiguous masks above low_threshold), "credit" (dInfer: threshold on logits boosted
    by tokens that stay on top) or "editing" (LLaDA2.1: masks above threshold become
    tokens, at least num_to_transfer a step, and placed tokens of the current block are
    rewritten when the model is more than editing_threshold sure of another; once no
    mask is left, up to max_post_steps more forwards edit the block); the rules are in
    dinfer_engine/decoding/decoders.py and dinfer_engine/decoding/editing.py. preset:
    LLaDA2.1's modes (dinfer_engine.choices.PRESETS), filling the fields the caller
    leaves unset. temperature 0 is greedy, else Gumbel-max sampling from a generator per
    sequence seeded with `seed`; top_k / top_p apply to each position on its own, so rows
    stay batch-invariant. logprobs: each answer token's log-probability at the iteration
    that committed it, with the top_logprobs most likely tokens there. cache: see
    dinfer_engine/forwards/forward.py; block-diffusion models ignore it and cache their
    committed blocks (dinfer_engine/forwards/block_forward.py). smoothing: dInfer's
    iteration smoothing (dinfer_engine/forwards/smoothing.py). max_batch_size /
    max_batch_tokens: the budget of rows, and of rows x padded width, decoded together;
    constraint_memory_mb: of the constrained rows' documented bytes (ADR 047).
    The uniform-noise fields are DiffusionGemma's loop's (dinfer_engine/canvas/uniform.py),
    named as in its generation_config.json."""

    # an upper bound: the canvas is whole blocks (canvas_length), the answer cut at it
    gen_length: int = row(
        Integer(1), 128, "Most answer tokens (gen_length).", spelt="max_tokens",
        family={"diffusion_gemma": 256},
        ceiling=Ceiling(f"{CONTEXT} minus the prompt's tokens (checked with the prompt, "
                        "jobs/intake/line_check.py)"))
    block_length: int = row(
        Integer(1), 32, "Tokens per diffusion block.", canvases=MASKED, family=BLOCKS,
        ceiling=Ceiling(f"{CONTEXT} (the canvas is whole blocks after the prompt)", "context"))
    # None: gen_length, one token per step as in LLaDA's examples
    steps: int = row(
        Integer(1), None, "Denoising steps for the whole answer.", canvases=MASKED,
        decoders=("fixed",),
        ceiling=Ceiling("max_tokens rounded up to whole blocks (one committed token per step "
                        "at least; more steps add forwards that commit nothing)",
                        "canvas_length"))
    decoder: str = row(OneOf(tuple(DECODERS)), "fixed", "Which tokens to commit.",
                       canvases=MASKED,
                       family={"llada2": "threshold", "llada21": EDITING})
    threshold: float = row(
        Number(0, 1, low_open=True), 0.9,
        f"Confidence for --decoder threshold, hierarchical, credit; for {EDITING}, the "
        "confidence that turns a mask into a token.", canvases=MASKED, decoders=THRESHOLDED,
        family={"llada2": 0.95, "llada21": 0.95}, ceiling=Ceiling("1"))
    low_threshold: float = row(Number(0, 1), 0.4, "Per-run confidence for --decoder "
                               "hierarchical.", canvases=MASKED, decoders=("hierarchical",),
                               ceiling=Ceiling("1"))
    editing_threshold: float = row(
        Number(0, 1), 0.9, f"--decoder {EDITING}: rewrite a placed token when the model is "
        "more sure than this of another.", canvases=MASKED, decoders=EDITS,
        family={"llada21": 0.9}, ceiling=Ceiling("1"))
    max_post_steps: int = row(
        Integer(0), 16, f"--decoder {EDITING}: most forwards over a block with no mask left.",
        canvases=MASKED, decoders=EDITS, family={"llada21": 16},
        ceiling=Ceiling(f"{CONTEXT} (passes over a finished block, a forward each; the "
                        "editing decoder's only)", "context", per_decoder=True))
    num_to_transfer: int = row(
        Integer(1), 1, f"--decoder {EDITING}: fewest masks filled per step.", canvases=MASKED,
        decoders=EDITS, family={"llada21": 1},
        ceiling=Ceiling("block_length (a step cannot place more tokens than its block has; "
                        "the editing decoder's only)", "block_length", per_decoder=True))
    preset: str | None = row(
        OneOf(tuple(PRESETS)), None, f"LLaDA2.1's decoding modes: the {EDITING} decoder with a "
        "low mask threshold and full editing (speed: threshold 0.5, editing-threshold 0), "
        "or conservative ones (quality: 0.7, 0.5); options given beside it win.",
        canvases=MASKED, decoders=EDITS, nullable=True)
    temperature: float = row(Number(0), 0.0, "0 is greedy.", canvases=MASKED,
                             ceiling=Ceiling(f"any finite number >= 0 {FREE}"))
    top_k: int = row(Integer(0), 0, None, canvases=MASKED,
                     ceiling=Ceiling("the model's vocabulary size (the k most likely of all "
                                     "tokens)", "vocabulary"))
    top_p: float = row(Number(0, 1, low_open=True), 1.0, None, canvases=MASKED,
                       ceiling=Ceiling("1"))
    logprobs: bool = row(Flag(), False, None, canvases=MASKED, per_row=True)
    top_logprobs: int = row(Integer(0, 20), 0, None, canvases=MASKED, per_row=True,
                            ceiling=Ceiling("20 (OpenAI's; checked in "
                                            "formats/parameters/params.py)"))
    seed: int | None = row(
        Integer(0), None, "One seed for every line that has none (sample i uses seed + i). "
        "Unset: line L uses --seed-base + 128 L.", nullable=True, per_row=True,
        ceiling=Ceiling(f"2**63 - 1 (checked in formats/parameters/params.py; {FREE[1:-1]})"))
    # the sampling controls over the answer committed so far (dinfer_engine/sampling_controls.py,
    # dinfer_engine/decoding/controls.py, docs/engine.md): OpenAI's and vLLM's names; per
    # row, each request's on its GenerationRequest.controls
    logit_bias: Mapping[str | int, float] | None = row(
        TokenBias(MAX_BIAS, MAX_BIASED), None, None, canvases=MASKED, nullable=True,
        per_row=True)
    presence_penalty: float = row(Number(-2, 2), 0.0, None, canvases=MASKED, ceiling=PENALTY,
                                  per_row=True)
    frequency_penalty: float = row(Number(-2, 2), 0.0, None, canvases=MASKED, ceiling=PENALTY,
                                   per_row=True)
    repetition_penalty: float = row(Number(0, low_open=True), 1.0, None, canvases=MASKED,
                                    ceiling=Ceiling(f"any finite number > 0 {FREE}"),
                                    per_row=True)
    min_p: float = row(Number(0, 1), 0.0, None, canvases=MASKED, ceiling=Ceiling("1"),
                       per_row=True)
    ignore_eos: bool = row(Flag(), False, None, canvases=MASKED, per_row=True)
    min_tokens: int = row(
        Integer(0), 0, None, canvases=MASKED, per_row=True,
        ceiling=Ceiling("max_tokens (no stop token before it: the answer's length at least)",
                        "gen_length"))
    cache: str = row(OneOf(tuple(CACHES)), "none", "KV cache mode.", canvases=MASKED)
    prefix_look: int = row(
        Integer(0), 16, "Columns before the block recomputed by --cache vicinity.",
        canvases=MASKED, ceiling=Ceiling(f"{CONTEXT} (the look-back cannot reach past the "
                                         "canvas)", "context"))
    after_look: int = row(
        Integer(0), 16, "Columns after the block recomputed by --cache vicinity.",
        canvases=MASKED, ceiling=Ceiling(f"{CONTEXT} (the look-ahead cannot reach past the "
                                         "canvas)", "context"))
    warmup_steps: int = row(
        Integer(0), 4, "Full forwards first, for --cache vicinity.", canvases=MASKED,
        ceiling=Ceiling(f"{CONTEXT} (warm-up forwards are some of the steps: past them it "
                        "changes nothing)", "context"))
    smoothing: bool = row(Flag(), False, "dInfer's iteration smoothing.", canvases=MASKED)
    cont_weight: float = row(Number(0, 1), 0.3, "Smoothing weight cap.", canvases=MASKED,
                             ceiling=Ceiling("1"))
    early_stop: bool = row(Flag(), True, None)  # stop once the answer has ended
    chat: bool = row(Flag(), False, None, request=False)  # apply the chat template
    max_batch_size: int = row(Integer(1), 64, None, request=False)
    max_batch_tokens: int = row(Integer(1), 65536, None, request=False)
    # what the constrained rows decoded together may hold (dinfer_engine/row_budget.py)
    constraint_memory_mb: int = row(Integer(1), 4096, None, request=False)
    # uniform-noise block diffusion: transformers' defaults for DiffusionGemma's generate
    max_denoising_steps: int = row(
        Integer(1), 48, "DiffusionGemma: most denoising steps per canvas.", canvases=UNIFORM,
        ceiling=Ceiling(f"{CONTEXT} (a decoder forward each, per canvas)", "context"))
    entropy_bound: float = row(
        Number(0, low_open=True), 0.1, "DiffusionGemma: accept the lowest-entropy samples "
        "within this.", canvases=UNIFORM, ceiling=Ceiling(f"any finite number > 0 {FREE}"))
    t_min: float = row(Number(0), 0.4, "DiffusionGemma: temperature at the last denoising "
                       "step.", canvases=UNIFORM,
                       ceiling=Ceiling(f"any finite number >= 0 {FREE}"))
    t_max: float = row(Number(0), 0.8, "DiffusionGemma: temperature at the first denoising "
                       "step.", canvases=UNIFORM,
                       ceiling=Ceiling(f"any finite number >= 0 {FREE}"))
    stability_threshold: int = row(
        Integer(0), 1, "DiffusionGemma: steps the argmax canvas must stay the same to stop.",
        canvases=UNIFORM,
        ceiling=Ceiling("max_denoising_steps (a canvas cannot be stable over more steps "
                        "than it has)", "max_denoising_steps"))
    confidence_threshold: float = row(
        Number(0, low_open=True), 0.005, "DiffusionGemma: mean entropy below which a stable "
        "canvas stops.", canvases=UNIFORM, ceiling=Ceiling(f"any finite number > 0 {FREE}"))

    @property
    def num_blocks(self) -> int:
        """The canvas's blocks: gen_length rounded up to whole blocks (ADR 059)."""
        return -(-self.gen_length // self.block_length)

    @property
    def canvas_length(self) -> int:
        """The answer region a masked or block canvas decodes: whole blocks, at least
        gen_length; the answer is cut at gen_length (dinfer_engine/engine.py)."""
        return self.num_blocks * self.block_length

    @property
    def steps_per_block(self) -> int:
        return self.steps // self.num_blocks


FIELDS: dict[str, Field] = rows_of(ResolvedConfig)


def family_defaults(family: str | None) -> dict[str, object]:
    """The settings a family recommends (its `family` column), under which the
    checkpoint's generation_config.json goes."""
    if family is None:
        return {}
    return {name: field.family[family] for name, field in FIELDS.items()
            if family in field.family}
