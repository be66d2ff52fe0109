"""Filling in the middle (dinfer_engine/infill.py): token-identical to our slow reference of
dllm's MDLM `infill` (tests/infill_reference.py) with the fixed decoder and no cache, on
random checkpoints in the LLaDA and LLaDA-MoE layouts, alone and inside mixed batches;
every decoder and cache keeps given text and batch invariance; the length search."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dinfer_engine import Engine, GenerationConfig, Infill, loop
from dinfer_engine.batch import FinishedRow, Request
from dinfer_engine.decoding.mdlm_schedule import mdlm_counts
from dinfer_engine.infill import plan_rows
from tests.engine.test_engine_batching import mixed_prompts
from tests.engine_requests import asked
from tests.infill_reference import mdlm_infill, transfer_counts
from tests.tiny_model import MASK_ID
from tests.tiny_moe import write_tiny_moe

# (pieces as token ids, span lengths); the first piece is 8 tokens long, a multiple of
# the block length 4 used below, so that block windows counted from the first token (the
# reference's) and from the first mask (ours) fall on the same columns
CASES = [
    ([[5, 9, 12, 7, 30, 11, 14, 22], [20, 21, 22, 23, 8]], [6]),
    ([[8, 8, 9, 10, 11, 12, 13, 14], [30, 31, 32], [15, 16, 17, 18, 19, 33]], [5, 7]),
    ([[17, 18, 19, 20, 21, 22, 23, 24], [25], [26, 27], [28]], [3, 4, 2]),
]


@pytest.fixture(scope="module")
def moe_engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return Engine.from_pretrained(write_tiny_moe(tmp_path_factory.mktemp("moe") / "m",
                                                 family="llada_moe"))


@pytest.fixture(params=["llada", "llada_moe"])
def engine(request: pytest.FixtureRequest, tiny_engine: Engine, moe_engine: Engine) -> Engine:
    return tiny_engine if request.param == "llada" else moe_engine


def decode_rows(engine: Engine, rows: list[tuple[list[int], list[int] | None]],
                config: GenerationConfig, seeds: list[int] | None = None) -> list[list[int]]:
    """Each row's prompt and decoded region, through the generation loop (all rows in one
    batch); sampled rows draw from generators seeded with `seeds`."""
    seeds = seeds or list(range(len(rows)))
    requests = [Request(i, prompt, seed, canvas=canvas)
                for i, ((prompt, canvas), seed) in enumerate(zip(rows, seeds, strict=True))]
    out: dict[int, FinishedRow] = {}
    loop.run(engine.model, requests, engine.resolve_config(config), engine.stop_ids,
                   lambda row: out.__setitem__(row.request.index, row))
    return [rows[i][0] + out[i].answer for i in range(len(rows))]


def canvas_rows(cases=CASES) -> list[tuple[list[int], list[int] | None]]:
    rows = []
    for pieces, spans in cases:
        plan = plan_rows(pieces, [spans], MASK_ID)[0]
        rows.append((plan.prompt, plan.canvas))
    return rows


def test_mdlm_counts_equal_the_reference_schedule():
    masks = torch.arange(0, 40)
    for steps in (1, 3, 4, 7, 12, 32):
        counts = mdlm_counts(masks, steps).tolist()
        for n in masks.tolist():
            expected = transfer_counts(n, steps)
            assert counts[n] == expected + [0] * (steps - len(expected))


@pytest.mark.parametrize("steps", [4, 7, 16])
def test_whole_canvas_as_one_block_matches_reference(engine: Engine, steps):
    """dllm's default: one window over the whole canvas. Ours: one block holding every
    mask (block_length reaching from the first mask to the last)."""
    rows = canvas_rows()
    config = GenerationConfig(gen_length=16, block_length=16, steps=steps, decoder="fixed",
                              cache="none", early_stop=False)
    ours = decode_rows(engine, rows, config)
    for (prompt, canvas), got in zip(rows, ours, strict=True):
        assert got == mdlm_infill(engine.model, prompt + canvas, steps), (prompt, canvas)


def test_a_canvas_shorter_than_a_block_is_decoded_in_place(engine: Engine):
    rows = [([5], [MASK_ID, MASK_ID, 9]), ([7, 8], [MASK_ID, 10, MASK_ID])]
    config = GenerationConfig(gen_length=8, block_length=8, steps=8, decoder="fixed",
                              cache="dual", early_stop=False)
    together = decode_rows(engine, rows + canvas_rows(), config)
    for (prompt, canvas), got in zip(rows, together[:len(rows)], strict=True):
        assert got == mdlm_infill(engine.model, prompt + canvas, 8)


@pytest.mark.parametrize("steps_per_block", [1, 3, 4])
def test_block_windows_from_the_first_token_match_reference(engine: Engine, steps_per_block):
    """dllm's block windows counted from the sequence start: with a first piece a whole
    number of blocks long, our blocks from the first mask are the same windows."""
    block = 4
    rows = canvas_rows()
    config = GenerationConfig(gen_length=8, block_length=block, steps=2 * steps_per_block,
                              decoder="fixed", cache="none", early_stop=False)
    ours = decode_rows(engine, rows, config)
    for (prompt, canvas), got in zip(rows, ours, strict=True):
        windows = -(-(len(prompt) + len(canvas)) // block)
        assert got == mdlm_infill(engine.model, prompt + canvas, windows * steps_per_block,
                                  block), (prompt, canvas)


def test_inside_a_mixed_batch_each_row_decodes_as_alone(engine: Engine):
    """Infill rows and ordinary rows of other lengths share a batch; every row's tokens
    equal its reference / its run alone."""
    config = GenerationConfig(gen_length=8, block_length=4, steps=8, decoder="fixed",
                              cache="none", early_stop=False)
    ordinary: list[tuple[list[int], list[int] | None]] = [(p, None) for p in mixed_prompts(5)]
    rows = canvas_rows() + ordinary + canvas_rows()
    together = decode_rows(engine, rows, config)
    for row, got in zip(rows, together, strict=True):
        assert got == decode_rows(engine, [row], config)[0]
        if row[1] is not None:
            windows = -(-len(got) // 4)
            assert got == mdlm_infill(engine.model, row[0] + row[1], windows * 4, 4)


CONFIGS = [
    GenerationConfig(decoder="threshold", cache="none"),
    GenerationConfig(decoder="threshold", cache="prefix"),
    GenerationConfig(decoder="threshold", cache="dual"),
    GenerationConfig(decoder="hierarchical", cache="vicinity", prefix_look=2, after_look=2,
                     warmup_steps=1),
    GenerationConfig(decoder="credit", cache="dual"),
    GenerationConfig(decoder="fixed", cache="dual", smoothing=True),
    GenerationConfig(decoder="fixed", cache="none", temperature=1.0, seed=5),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.decoder}-{c.cache}")
def test_every_decoder_and_cache_keeps_given_text_and_batch_invariance(engine: Engine, config):
    config = GenerationConfig(**{**config.__dict__, "gen_length": 8, "block_length": 4,
                                 "steps": 8, "early_stop": False})
    rows = canvas_rows() + [(p, None) for p in mixed_prompts(3)]
    together = decode_rows(engine, rows, config)
    for (prompt, canvas), got in zip(rows, together, strict=True):
        assert MASK_ID not in got
        if canvas is not None:
            given = [(i, t) for i, t in enumerate(prompt + canvas) if t != MASK_ID]
            assert all(got[i] == t for i, t in given)
    # seeded sampling draws from each row's own generator, so rows stay invariant too
    for i, (row, got) in enumerate(zip(rows, together, strict=True)):
        assert got == decode_rows(engine, [row], config, seeds=[i])[0]


def test_blocks_of_given_text_cost_no_forward(tiny_engine: Engine):
    pieces = [[5, 6, 7, 8], list(range(10, 40))]
    counts = {}
    for cache in ("none", "dual"):
        config = GenerationConfig(gen_length=8, block_length=4, steps=8, cache=cache,
                                  decoder="fixed", early_stop=False)
        result = tiny_engine.generate([Infill(pieces, spans=[8])], config)[0]
        counts[cache] = result.nfe
    assert counts["none"] == counts["dual"] == 8  # blocks of suffix text cost nothing


def test_engine_generate_returns_each_gaps_text_without_eos(tiny_engine: Engine):
    config = GenerationConfig(gen_length=8, block_length=4, steps=8, decoder="fixed",
                              cache="none", early_stop=False)
    pieces, spans = CASES[1]
    result = tiny_engine.generate([Infill(pieces, spans=spans)], config)[0]
    full = decode_rows(tiny_engine, canvas_rows([CASES[1]]), config)[0]
    stops = set(tiny_engine.stop_ids)
    starts = [8, 8 + 5 + 3]
    expected_gaps = []
    for start, span in zip(starts, spans, strict=True):
        tokens = full[start:start + span]
        cut = next((i for i, t in enumerate(tokens) if t in stops), span)
        expected_gaps.append(tokens[:cut])
    assert result.token_ids == expected_gaps[0] + expected_gaps[1]
    assert result.gaps == [tiny_engine.tokenizer.decode(g, skip_special_tokens=True)
                           for g in expected_gaps]
    assert result.text == "".join(result.gaps)
    assert result.spans == spans and result.length_search is None


def test_text_pieces_and_default_span_length(tiny_engine: Engine):
    config = GenerationConfig(gen_length=8, block_length=4, steps=8, early_stop=False)
    text = tiny_engine.generate([Infill(["abc d", "e fgh"])], config)[0]
    ids = tiny_engine.tokenizer("abc d")["input_ids"]
    after = tiny_engine.tokenizer("e fgh", add_special_tokens=False)["input_ids"]
    same = tiny_engine.generate([Infill([ids, after], spans=[8])], config)[0]
    assert (text.token_ids, text.gaps, text.spans) == (same.token_ids, same.gaps, [8])


def test_length_search_keeps_the_best_mean_logprob(tiny_engine: Engine):
    config = GenerationConfig(gen_length=16, block_length=4, steps=16, early_stop=False)
    pieces, _ = CASES[0]
    searched = tiny_engine.generate([Infill(pieces, lengths=[4, 8, 16])], config)[0]
    assert searched.length_search is not None
    assert [length for length, _ in searched.length_search] == [4, 8, 16]
    best_length, best_score = max(searched.length_search, key=lambda c: c[1])
    assert searched.spans == [best_length]
    for length, score in searched.length_search:
        alone = tiny_engine.generate([Infill(pieces, spans=[length])],
                                     GenerationConfig(**{**config.__dict__, "logprobs": True}))
        row = decode_rows(tiny_engine, canvas_rows([(pieces, [length])]), config)[0]
        assert score <= best_score
        if length == best_length:
            assert searched.token_ids == alone[0].token_ids
        assert len(row) == len(pieces[0]) + length + len(pieces[1])
    # the forced log-probabilities are not returned when not asked for
    assert searched.logprobs is None


def test_auto_lengths_are_gen_length_and_its_halvings():
    assert Infill(["a", "b"], lengths="auto").span_sets(64) == [[8], [16], [32], [64]]
    assert Infill(["a", "b", "c"], lengths="auto").span_sets(4) == [[4, 4]]
    assert Infill(["a", "b"], lengths=[16, 8, 16]).span_sets(64) == [[8], [16]]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"pieces": ["only one"]}, "at least two pieces"),
    ({"pieces": ["a", [1, 2]]}, "all be text or all be token ids"),
    ({"pieces": ["a", "b"], "spans": [1, 2]}, "need 1 span lengths"),
    ({"pieces": ["a", "b"], "spans": [0]}, "integers >= 1"),
    ({"pieces": ["a", "b"], "lengths": "best"}, "'auto'"),
    ({"pieces": ["a", "b"], "lengths": []}, "at least one"),
])
def test_bad_infill_prompts_are_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Infill(**kwargs)


def test_block_diffusion_models_refuse_infill(tmp_path: Path):
    engine = Engine.from_pretrained(write_tiny_moe(tmp_path / "l2", family="llada2"))
    with pytest.raises(ValueError, match="prompt 1: infill needs a bidirectional model"):
        engine.generate([[5, 6], Infill([[5], [6]], spans=[4])],
                        GenerationConfig(gen_length=8, block_length=4))


def test_a_canvas_beyond_the_context_is_a_value_error(tiny_engine: Engine):
    with pytest.raises(ValueError, match="exceeds the model's max_sequence_length"):
        tiny_engine.generate([Infill([[5] * 200, [6] * 50], spans=[16])],
                             GenerationConfig(gen_length=16, block_length=16))


def test_the_editing_decoder_refuses_infill(tiny_engine: Engine):
    """Editing rewrites placed tokens of its block: on a canvas those include given text."""
    with pytest.raises(ValueError, match="infill cannot use the editing decoder"):
        tiny_engine.generate([Infill([[5, 6], [7, 8]], spans=[4])],
                             GenerationConfig(gen_length=8, block_length=8, decoder="editing"))


def test_a_constraint_on_an_infill_prompt_is_a_value_error(tiny_engine: Engine):
    from dinfer_engine.constraints.spec import ConstraintSpec

    spec = ConstraintSpec.choice(["ab"])
    with pytest.raises(ValueError, match="not to infill gaps"):
        tiny_engine.generate(asked([Infill([[5, 6], [7, 8]], spans=[4])], constraints=[spec]),
                             GenerationConfig(gen_length=8, block_length=8))
