"""The sampling controls (dinfer_engine/decoding/controls.py, docs/adr/060) against the slow
reference written from their definitions (tests/controls_reference.py) on LLaDA,
LLaDA-MoE, LLaDA2's block diffusion and LLaDA2.1's editing, alone and in mixed batches:
rows with different controls and neutral rows decoded together give each row's own
tokens, with every decoder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dinfer_engine import Engine, GenerationConfig, GenerationRequest
from dinfer_engine.batch import FinishedRow, Layout, Request, RunningBatch
from dinfer_engine.canvas.masked import MaskCanvas
from dinfer_engine.constraints.spec import ConstraintSpec
from dinfer_engine.decoding.controls import RowControls
from dinfer_engine.decoding.decoders import keep_min_p, sample, sample_scored
from dinfer_engine.loop import run
from dinfer_engine.sampling_controls import SamplingControls
from tests.controls_reference import (
    ControlledModel,
    Controls,
    controlled_forward,
    controlled_logits,
)
from tests.editing_reference import llada21_generate
from tests.engine.test_engine_decoding import llada_generate, threshold_generate
from tests.engine.test_engine_moe import full_window
from tests.engine_requests import asked
from tests.moe_reference import llada2_generate
from tests.tiny_model import EOS_ID, EXTRA_STOP_ID, MASK_ID, PAD_ID
from tests.tiny_moe import write_tiny_moe

PROMPTS = [[5, 9, 12, 7], [20, 21], [8] * 11]
GEN, BLOCK = 16, 8
EOS_LIKELY = {EOS_ID: 12.0, EXTRA_STOP_ID: 10.0}  # the tiny models rarely end otherwise
CASES = {
    "bias": Controls(logit_bias={7: 6.0, 16: -100.0, 28: 2.5}),
    "presence": Controls(presence_penalty=1.5),
    "frequency": Controls(frequency_penalty=2.0),
    "negative penalties": Controls(presence_penalty=-0.5, frequency_penalty=-1.0),
    "repetition": Controls(repetition_penalty=1.7),
    "repetition below 1": Controls(repetition_penalty=0.6),
    "min_tokens": Controls(logit_bias=EOS_LIKELY, min_tokens=9),
    "ignore_eos": Controls(logit_bias=EOS_LIKELY, ignore_eos=True),
    "all": Controls(logit_bias={**EOS_LIKELY, 5: 3.0}, presence_penalty=0.4,
                    frequency_penalty=0.3, repetition_penalty=1.3, min_tokens=5),
}
NEUTRAL = Controls()


def engine_controls(controls: Controls) -> SamplingControls:
    return SamplingControls(tuple(sorted(controls.logit_bias.items())),
                            controls.presence_penalty, controls.frequency_penalty,
                            controls.repetition_penalty, 0.0, controls.ignore_eos,
                            controls.min_tokens)


def decoded(engine: Engine, rows: list[tuple[list[int], Controls]], **fields
            ) -> list[list[int]]:
    """Each row's answer when `rows` are decoded together, each with its own controls
    (the loop's Requests, as the engine will fill them per line)."""
    config = engine.resolve_config(GenerationConfig(**fields))
    requests = [Request(i, prompt, None, controls=engine_controls(controls))
                for i, (prompt, controls) in enumerate(rows)]
    answers: dict[int, list[int]] = {}

    def finish(row: FinishedRow) -> None:
        answers[row.request.index] = row.answer[:config.gen_length]

    run(engine.model, requests, config, engine.stop_ids, finish)
    return [answers[i] for i in range(len(rows))]


def fixed(**fields) -> dict:
    return dict(gen_length=GEN, block_length=BLOCK, steps=GEN, decoder="fixed",
                early_stop=False) | fields


def ended(tokens: list[int]) -> bool:
    return any(t in (EOS_ID, EXTRA_STOP_ID) for t in tokens)


@pytest.mark.parametrize("case", list(CASES))
def test_each_control_matches_the_reference_on_llada(tiny_engine: Engine, case):
    controls, stops = CASES[case], tiny_engine.stop_ids
    fields = fixed() | controls.fields()
    outs = tiny_engine.generate(PROMPTS, GenerationConfig(**fields))
    plain = tiny_engine.generate(PROMPTS, GenerationConfig(**fixed()))
    for prompt, out in zip(PROMPTS, outs, strict=True):
        model = ControlledModel(tiny_engine.model, len(prompt), GEN, controls, stops)
        assert out.token_ids == llada_generate(model, prompt, GEN, GEN, BLOCK)
    assert [o.token_ids for o in outs] != [o.token_ids for o in plain]
    threshold = fixed(decoder="threshold", threshold=0.7) | controls.fields()
    outs = tiny_engine.generate(PROMPTS, GenerationConfig(**threshold))
    for prompt, out in zip(PROMPTS, outs, strict=True):
        model = ControlledModel(tiny_engine.model, len(prompt), GEN, controls, stops)
        assert (out.token_ids, out.nfe) == threshold_generate(model, prompt, GEN, BLOCK, 0.7)


def test_stop_tokens_wait_for_min_tokens_and_never_come_with_ignore_eos(tiny_engine):
    free = decoded(tiny_engine, [(p, Controls(logit_bias=EOS_LIKELY)) for p in PROMPTS],
                   **fixed())
    assert all(ended(answer[:9]) for answer in free)  # the bias alone ends them early
    late = decoded(tiny_engine, [(p, CASES["min_tokens"]) for p in PROMPTS], **fixed())
    assert not any(ended(answer[:9]) for answer in late)
    assert all(ended(answer) for answer in late)
    never = decoded(tiny_engine, [(p, CASES["ignore_eos"]) for p in PROMPTS], **fixed())
    assert not any(ended(answer) for answer in never)


@pytest.mark.parametrize("decoder", ["fixed", "threshold", "hierarchical", "credit",
                                     "editing"])
def test_mixed_batches_give_each_row_its_own_tokens(tiny_engine: Engine, decoder):
    """Rows with different controls and neutral rows together, wider than a batch
    (rows leave and join), equal each row decoded alone."""
    rows = [(PROMPTS[i % len(PROMPTS)], controls)
            for i, controls in enumerate([NEUTRAL, *CASES.values(), NEUTRAL])]
    fields = fixed(decoder=decoder, threshold=0.7, max_batch_size=4)
    together = decoded(tiny_engine, rows, **fields)
    for row, answer in zip(rows, together, strict=True):
        assert decoded(tiny_engine, [row], **fields) == [answer]
    assert together[0] == tiny_engine.generate([rows[0][0]], GenerationConfig(
        **fields))[0].token_ids  # a neutral row is the plain engine's


@pytest.fixture(scope="module")
def moe_engines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Engine]:
    root = tmp_path_factory.mktemp("controls")
    paths: dict[str, Path] = {
        "llada_moe": write_tiny_moe(root / "llada_moe", "llada_moe"),
        "llada2": write_tiny_moe(root / "llada2", "llada2"),
        "llada21": write_tiny_moe(root / "llada21", "llada2", model_type="llada21_moe")}
    return {name: Engine.from_pretrained(path) for name, path in paths.items()}


@pytest.mark.parametrize("case", ["all", "repetition", "ignore_eos"])
def test_llada_moe_and_block_diffusion_match_the_reference(moe_engines, case):
    controls = CASES[case]
    masked, blocks = moe_engines["llada_moe"], moe_engines["llada2"]
    config = GenerationConfig(gen_length=8, block_length=4, steps=8, decoder="fixed",
                              early_stop=False, **controls.fields())
    for prompt, out in zip(PROMPTS, masked.generate(PROMPTS, config), strict=True):
        model = ControlledModel(masked.model, len(prompt), 8, controls, masked.stop_ids)
        assert out.token_ids == llada_generate(model, prompt, 8, 8, 4)
    for decoder, steps in (("threshold", 8), ("fixed", 4)):
        config = GenerationConfig(gen_length=8, block_length=4, steps=steps, decoder=decoder,
                                  threshold=0.8, early_stop=False, **controls.fields())
        for prompt, out in zip(PROMPTS, blocks.generate(PROMPTS, config), strict=True):
            forward = controlled_forward(full_window(blocks, 4), len(prompt), 8, controls,
                                         blocks.stop_ids)
            assert (out.token_ids, out.nfe) == llada2_generate(
                forward, prompt, 8, 4, steps // 2, 0.8 if decoder == "threshold" else None)


@pytest.mark.parametrize("case", ["all", "strong", "repetition below 1"])
def test_editing_matches_the_reference(moe_engines, case):
    """A position's own token is not counted against it when the editor rereads it."""
    controls = CASES.get(case, Controls(presence_penalty=2.0, frequency_penalty=2.0,
                                        repetition_penalty=3.0))
    engine = moe_engines["llada21"]
    setting = (0.5, 0.0, 4, 1)
    config = GenerationConfig(decoder="editing", threshold=0.5, editing_threshold=0.0,
                              max_post_steps=4, num_to_transfer=1, gen_length=8,
                              block_length=4, early_stop=False, **controls.fields())
    for prompt, out in zip(PROMPTS, engine.generate(PROMPTS, config), strict=True):
        forward = controlled_forward(full_window(engine, 4), len(prompt), 8, controls,
                                     engine.stop_ids)
        reference = llada21_generate(forward, prompt, 8, 4, *setting)
        assert (out.token_ids, out.nfe) == (reference.answer, reference.forwards)


@pytest.mark.parametrize("min_p", [0.0, 0.05, 0.3, 1.0])
def test_min_p_keeps_what_the_definition_keeps(min_p):
    logits = torch.randn(3, 4, 50, generator=torch.Generator().manual_seed(1),
                         dtype=torch.float64) * 3
    for temperature in (0.5, 1.0, 2.0):
        kept = logits.clone()
        keep_min_p(kept, temperature, torch.tensor([min_p, 0.0, min_p], dtype=torch.float64))
        probs = torch.softmax(logits / temperature, dim=-1)
        wanted = probs >= min_p * probs.amax(-1, keepdim=True)
        wanted[1] = True  # the neutral row keeps everything
        assert torch.equal(kept.isfinite(), wanted)


def test_min_p_narrows_draws_and_leaves_greedy_and_confidence_alone(tiny_engine: Engine):
    logits = torch.randn(2, 6, 40, generator=torch.Generator().manual_seed(2)) * 2
    floor = torch.tensor([0.5, 0.5], dtype=torch.float64)
    greedy = sample(logits, 0.0, [None, None], 3)
    assert all(torch.equal(a, b) for a, b in zip(
        greedy, decoders_sample(logits, 0.0, floor), strict=True))
    for seed in range(20):
        tokens, confidence = decoders_sample(logits, 1.0, floor, seed)
        probs = torch.softmax(logits.double(), -1)
        chosen = probs.gather(-1, tokens[..., None])[..., 0]
        best = probs[..., torch.arange(40) != 3].amax(-1)  # the mask is never drawn
        assert (chosen >= 0.5 * best).all()
        torch.testing.assert_close(confidence, chosen, rtol=1e-12, atol=0)


def decoders_sample(logits: torch.Tensor, temperature: float, min_p: torch.Tensor,
                    seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generators = [torch.Generator().manual_seed(seed + i) for i in range(len(logits))]
    tokens, confidence, _ = sample_scored(logits, temperature, generators, 3, min_p=min_p)
    return tokens, confidence


def test_sampled_rows_with_min_p_do_not_depend_on_their_batch(tiny_engine: Engine):
    config = tiny_engine.resolve_config(GenerationConfig(**fixed(temperature=1.0)))
    def requests(count: int) -> list[Request]:
        return [Request(i, PROMPTS[i % 3], 7 + i,
                        controls=SamplingControls(min_p=(0.0, 0.2, 0.6)[i % 3]))
                for i in range(count)]
    answers: dict[int, list[int]] = {}
    run(tiny_engine.model, requests(6), config, tiny_engine.stop_ids,
        lambda row: answers.__setitem__(row.request.index, row.answer))
    for i, request in enumerate(requests(6)):
        alone: dict[int, list[int]] = {}
        run(tiny_engine.model, [request], config, tiny_engine.stop_ids,
            lambda row, into=alone: into.__setitem__(0, row.answer))
        assert alone == {0: answers[i]}


def test_what_cannot_be_honoured_is_refused_by_name(tiny_engine: Engine):
    with pytest.raises(ValueError, match="logit_bias names token 500, outside"):
        tiny_engine.generate(["a"], GenerationConfig(logit_bias={"500": 1}, gen_length=8,
                                                     block_length=8))
    with pytest.raises(ValueError, match="must be in \\[-2, 2\\]"):
        GenerationConfig(presence_penalty=3).resolve({})
    with pytest.raises(ValueError, match="logit_bias keys must be token ids"):
        GenerationConfig(logit_bias={"07": 1}).resolve({})
    with pytest.raises(ValueError, match="logit_bias does not apply to DiffusionGemma"):
        GenerationConfig(logit_bias={"7": 1}).resolve({}, "diffusion_gemma")
    with pytest.raises(ValueError, match="structured outputs cannot use ignore_eos"):
        tiny_engine.generate(asked(["a"], constraints=[ConstraintSpec.choice(["yes", "no"])]),
                             GenerationConfig(ignore_eos=True, gen_length=8, block_length=8))
    with pytest.raises(ValueError, match="structured outputs cannot use ignore_eos"):
        tiny_engine.generate([GenerationRequest(
            "a", constraint=ConstraintSpec.choice(["yes", "no"]),
            controls=SamplingControls(ignore_eos=True))],
            GenerationConfig(gen_length=8, block_length=8))
    with pytest.raises(ValueError, match="prompt 1: logit_bias names token 500, outside"):
        tiny_engine.generate(["a", GenerationRequest("b", controls=SamplingControls(
            logit_bias=((500, 1.0),)))], GenerationConfig(gen_length=8, block_length=8))


def test_the_batched_controls_equal_the_definition_at_every_position(tiny_engine: Engine):
    """RowControls on a batch whose answers hold tokens in and before the current block
    (where an editing decoder rereads them: a position's own token is not counted against
    it), against the reference, row by row."""
    config = tiny_engine.resolve_config(GenerationConfig(**fixed()))
    rows = [(PROMPTS[i % 3], c) for i, c in enumerate([*CASES.values(), NEUTRAL])]
    requests = [Request(i, prompt, None, controls=engine_controls(controls))
                for i, (prompt, controls) in enumerate(rows)]
    batch = RunningBatch(Layout(GEN, BLOCK, MASK_ID, PAD_ID, torch.device("cpu")), None,
                         MaskCanvas(config, tiny_engine.model))
    controls = RowControls(requests, tiny_engine.stop_ids)
    controls.setup(batch)
    batch.add(requests)
    generator = torch.Generator().manual_seed(3)
    start = (batch.pad + batch.prompt_length).tolist()
    for i in range(batch.size):  # the first block and some of the second: tokens
        answer = torch.randint(4, 12, (GEN,), generator=generator)
        answer[BLOCK:][torch.rand(BLOCK, generator=generator) < 0.5] = MASK_ID
        batch.ids[i, start[i]:start[i] + GEN] = answer
    batch.block += 1
    vocabulary = tiny_engine.model.config.embedding_size
    logits = torch.randn(batch.size, BLOCK, vocabulary, generator=generator) * 4
    got = logits.clone()
    controls.apply(got, batch)
    for i, (prompt, row_controls) in enumerate(rows):
        window = batch.ids[i, start[i] - len(prompt):]
        full = torch.zeros(len(window), vocabulary)
        full[len(prompt) + BLOCK:] = logits[i]
        want = controlled_logits(full, window, len(prompt), GEN, row_controls,
                                 tiny_engine.stop_ids)[len(prompt) + BLOCK:]
        assert torch.equal(got[i], want), i


def test_a_constrained_row_chooses_by_the_controlled_logits(tiny_engine: Engine):
    """The witness reads the logits the controls changed: a biased-away first letter
    picks the other choice."""
    spec = [ConstraintSpec.choice(["yes", "no"])] * 2
    y = tiny_engine.tokenizer("y", add_special_tokens=False)["input_ids"][-1]
    plain = GenerationConfig(gen_length=8, block_length=8)
    assert [o.text for o in tiny_engine.generate(asked(["a", "b"], constraints=spec),
                                                 plain)] == ["yes", "yes"]
    banned = GenerationConfig(gen_length=8, block_length=8, logit_bias={str(y): -100})
    assert [o.text for o in tiny_engine.generate(asked(["a", "b"], constraints=spec),
                                                 banned)] == ["no", "no"]


def test_requests_with_their_own_controls_share_a_call(tiny_engine: Engine):
    """Each GenerationRequest's controls (the service's per line) give its rows the
    tokens a call with those controls in its config gives, in one call beside neutral
    rows; a request without controls reads the config's."""
    cases = [CASES["bias"], NEUTRAL, CASES["all"], CASES["repetition"]]
    together = tiny_engine.generate(
        [GenerationRequest(PROMPTS[i % 3], controls=engine_controls(controls))
         for i, controls in enumerate(cases)], GenerationConfig(**fixed()))
    for i, (controls, out) in enumerate(zip(cases, together, strict=True)):
        [alone] = tiny_engine.generate([PROMPTS[i % 3]],
                                       GenerationConfig(**fixed() | controls.fields()))
        assert out.token_ids == alone.token_ids, i
    [configured] = tiny_engine.generate([PROMPTS[0]], GenerationConfig(
        **fixed() | CASES["bias"].fields()))
    assert configured.token_ids == together[0].token_ids
