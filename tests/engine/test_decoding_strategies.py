"""dInfer's decoding strategies (hierarchical and credit decoders, iteration smoothing,
vicinity refresh) against slow one-row references written from their rules, and their
independence from batch mates and earlier requests."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dinfer_batch.formats.parameters import params
from dinfer_engine import Engine, GenerationConfig
from tests.engine.test_engine_batching import STOP_AT, mixed_prompts, stops_at
from tests.engine.test_engine_cache import recorded
from tests.moe_reference import block_causal_mask, linear_counts
from tests.tiny_model import MASK_ID
from tests.tiny_moe import write_tiny_moe

PROMPTS = [[5, 9, 12, 7], [20, 21], [8] * 11, [30, 31, 32, 33, 34, 35]]
GEN, BLOCK = 16, 8


def top_tokens(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Argmax over every token but the mask, and its float64 softmax probability."""
    probs = torch.softmax(logits.to(torch.float64), dim=-1)
    banned = logits.to(torch.float64).clone()
    banned[..., MASK_ID] = -torch.inf
    x0 = banned.argmax(-1)
    return x0, probs.gather(-1, x0[..., None]).squeeze(-1)


def most_confident(positions: list[int], p: torch.Tensor) -> int:
    return max(positions, key=lambda j: (float(p[j]), -j))  # ties: the leftmost


def canvas(prompt: list[int]) -> torch.Tensor:
    return torch.tensor([prompt + [MASK_ID] * GEN])


@torch.no_grad()
def hierarchical_reference(model, prompt: list[int], threshold: float,
                           low_threshold: float) -> tuple[list[list[int]], int]:
    """dInfer's hierarchical rule, one row: the canvas before every forward, and how many
    runs' best positions were committed only because of the run rule."""
    x, seen, run_only = canvas(prompt), [], 0
    for b in range(GEN // BLOCK):
        block = range(len(prompt) + b * BLOCK, len(prompt) + (b + 1) * BLOCK)
        while any(x[0, j] == MASK_ID for j in block):
            seen.append(x[0].tolist())
            x0, p = top_tokens(model(x).logits[0])
            masked = [j for j in block if x[0, j] == MASK_ID]
            runs: list[list[int]] = []
            for j in masked:
                if runs and runs[-1][-1] == j - 1:
                    runs[-1].append(j)
                else:
                    runs.append([j])
            chosen = {most_confident(masked, p)} | {j for j in masked if p[j] >= threshold}
            for run in runs:
                best = most_confident(run, p)
                if p[best] > low_threshold and best not in chosen:
                    run_only += 1
                    chosen.add(best)
            for j in chosen:
                x[0, j] = x0[j]
    seen.append(x[0].tolist())
    return seen, run_only


@torch.no_grad()
def credit_reference(model, prompt: list[int], threshold: float) -> tuple[list[list[int]], int]:
    """dInfer's credit rule with a dense [block, vocabulary] credit table per block, one
    row: the canvases, and how many iterations committed other positions than the plain
    threshold rule would have."""
    x, seen, changed = canvas(prompt), [], 0
    for b in range(GEN // BLOCK):
        block = list(range(len(prompt) + b * BLOCK, len(prompt) + (b + 1) * BLOCK))
        credit = torch.zeros(BLOCK, model.config.embedding_size, dtype=torch.float64)
        while any(x[0, j] == MASK_ID for j in block):
            seen.append(x[0].tolist())
            logits = model(x).logits[0, block].to(torch.float64)
            top, p = top_tokens(logits)
            credit *= 0.8
            for i, j in enumerate(block):
                if x[0, j] == MASK_ID:
                    credit[i, top[i]] += p[i] ** 0.2
            picks = []
            for scores in (logits + 0.7 * torch.log1p(credit), logits):
                x0, conf = top_tokens(scores)
                masked = [i for i, j in enumerate(block) if x[0, j] == MASK_ID]
                chosen = {i for i in masked if conf[i] >= threshold}
                picks.append((chosen or {most_confident(masked, conf)}, x0))
            changed += picks[0][0] != picks[1][0]
            chosen, x0 = picks[0]
            for i in chosen:
                x[0, block[i]] = x0[i]
    seen.append(x[0].tolist())
    return seen, changed


@torch.no_grad()
def smoothing_reference(model, prompt: list[int], threshold: float,
                        cont_weight: float) -> list[list[int]]:
    """dInfer's iteration smoothing with the threshold rule, one row, no cache: after
    iteration i the block's still-masked positions are fed E[mask] + w_i softmax(logits) E,
    w_i = min(0.15 + 0.02 i, cont_weight); iteration i's threshold is
    max(1 - 0.02 i, threshold)."""
    table = model.embedding().weight
    x, seen, iteration = canvas(prompt), [], 0
    soft = torch.zeros(x.shape[1], table.shape[1])
    for b in range(GEN // BLOCK):
        block = range(len(prompt) + b * BLOCK, len(prompt) + (b + 1) * BLOCK)
        while any(x[0, j] == MASK_ID for j in block):
            seen.append(x[0].tolist())
            embeds = table[x[0]].clone()
            for j in range(x.shape[1]):
                if x[0, j] == MASK_ID:
                    embeds[j] += soft[j]
            logits = model(x, inputs_embeds=embeds[None]).logits[0]
            x0, p = top_tokens(logits)
            masked = [j for j in block if x[0, j] == MASK_ID]
            bar = max(1 - 0.02 * iteration, threshold)
            chosen = {j for j in masked if p[j] >= bar} or {most_confident(masked, p)}
            weight = min(0.15 + 0.02 * iteration, cont_weight)
            for j in masked:
                if j in chosen:
                    x[0, j] = x0[j]
                else:
                    soft[j] = weight * (torch.softmax(logits[j].float(), -1) @ table)
            iteration += 1
    seen.append(x[0].tolist())
    return seen


def engine_canvases(engine: Engine, prompt: list[int], config: GenerationConfig) -> list:
    """The full-row canvas fed to each forward, then the final one (cache "none")."""
    with recorded(engine) as calls:
        out = engine.generate([prompt], config)[0]
    assert out.nfe == len(calls)
    return [c.kwargs["input_ids"][0].tolist() for c in calls] + [prompt + out.token_ids]


def config_of(**fields) -> GenerationConfig:
    return GenerationConfig(gen_length=GEN, block_length=BLOCK, early_stop=False, **fields)


def test_hierarchical_commits_exactly_what_its_rule_says(tiny_engine: Engine):
    run_only = 0
    for prompt in PROMPTS:
        expected, extra = hierarchical_reference(tiny_engine.model, prompt, 0.9, 0.4)
        run_only += extra
        config = config_of(decoder="hierarchical", threshold=0.9, low_threshold=0.4)
        assert engine_canvases(tiny_engine, prompt, config) == expected
    assert run_only > 0  # the run rule itself was exercised


def test_credit_commits_exactly_what_its_rule_says(tiny_engine: Engine):
    changed = 0
    for prompt in PROMPTS:
        expected, differs = credit_reference(tiny_engine.model, prompt, 0.9)
        changed += differs
        assert engine_canvases(tiny_engine, prompt, config_of(decoder="credit")) == expected
    assert changed > 0  # credit changed some decision of the plain threshold rule


def test_smoothing_commits_exactly_what_its_rule_says(tiny_engine: Engine):
    for prompt in PROMPTS:
        expected = smoothing_reference(tiny_engine.model, prompt, 0.7, 0.3)
        config = config_of(decoder="threshold", threshold=0.7, smoothing=True)
        with recorded(tiny_engine) as calls:
            out = tiny_engine.generate([prompt], config)[0]
        fed = [c.kwargs["input_ids"][0].tolist() for c in calls]
        assert fed + [prompt + out.token_ids] == expected
        assert all(c.kwargs["inputs_embeds"] is not None for c in calls)


@torch.no_grad()
def llada2_smoothing_reference(model, prompt: list[int], gen: int, block: int, steps: int,
                               threshold: float, cont_weight: float) -> tuple[list[int], int]:
    """LLaDA2's generate (tests/moe_reference.llada2_generate: absolute block grid, the
    window up to the block's end recomputed under the block-causal mask, every masked
    token above the threshold and at least the schedule's count) with iteration smoothing
    as in smoothing_reference, i counting the row's forwards."""
    table = model.embedding().weight
    blocks = -(-(len(prompt) + gen) // block)
    x = torch.full((blocks * block,), MASK_ID, dtype=torch.long)
    x[:len(prompt)] = torch.tensor(prompt)
    soft, schedule, i = torch.zeros(len(x), table.shape[1]), linear_counts(block, steps), 0
    for b in range(len(prompt) // block, blocks):
        start, end = b * block, (b + 1) * block
        for step in range(steps):
            masked = x[start:end] == MASK_ID
            if not masked.any():
                break
            embeds = table[x[:end]] + torch.where((x[:end] == MASK_ID)[:, None], soft[:end], 0)
            positions = torch.arange(end)[None]
            logits = model(x[None, :end], position_ids=positions, logits_index=positions,
                           attention_mask=block_causal_mask(end, block)[None],
                           inputs_embeds=embeds[None]).logits[0, start:end]
            tokens, p = top_tokens(logits)
            confidence = torch.where(masked, p, -torch.inf)
            count = max(int((confidence > max(1 - 0.02 * i, threshold)).sum()),
                        min(schedule[step], int(masked.sum())))
            chosen = torch.zeros_like(masked)
            chosen[confidence.topk(count).indices] = True
            weight = min(0.15 + 0.02 * i, cont_weight)
            spread = weight * (torch.softmax(logits.float(), -1) @ table)
            soft[start:end] = torch.where((masked & ~chosen)[:, None], spread, 0)
            x[start:end] = torch.where(chosen, tokens, x[start:end])
            i += 1
    return x[len(prompt):len(prompt) + gen].tolist(), i


def test_llada2_smoothing_commits_exactly_what_its_rule_says(tmp_path):
    """Block diffusion with its committed-block cache, prompts ending mid-block and on a
    block boundary: the soft inputs follow each row's blocks on the absolute grid."""
    engine = Engine.from_pretrained(write_tiny_moe(tmp_path / "llada2", "llada2"))
    config = GenerationConfig(gen_length=12, block_length=4, steps=12, decoder="threshold",
                              threshold=0.6, smoothing=True, cont_weight=0.3,
                              early_stop=False)
    prompts = [[5, 9, 12, 7, 30], [20, 21, 22, 23, 24, 25, 26, 27], [8]]
    outs = engine.generate(prompts, config)
    for prompt, out in zip(prompts, outs, strict=True):
        expected = llada2_smoothing_reference(engine.model, prompt, 12, 4, 4, 0.6, 0.3)
        assert (out.token_ids, out.nfe) == expected
    plain = engine.generate(prompts, dataclasses.replace(config, smoothing=False))
    assert [o.token_ids for o in plain] != [o.token_ids for o in outs]  # smoothing mattered


@pytest.mark.parametrize("decoder", ["fixed", "threshold"])
def test_smoothing_with_weight_zero_equals_no_smoothing(tiny_engine: Engine, decoder):
    # threshold 1.0: the annealed threshold (1.0 down to the configured one) is constant
    base = config_of(decoder=decoder, threshold=1.0, steps=GEN, cache="dual")
    smooth = dataclasses.replace(base, smoothing=True, cont_weight=0.0)
    plain = tiny_engine.generate(PROMPTS, base)
    for a, b in zip(plain, tiny_engine.generate(PROMPTS, smooth), strict=True):
        assert (a.token_ids, a.nfe) == (b.token_ids, b.nfe)


def test_vicinity_without_looks_or_warmup_equals_dual(tiny_engine: Engine):
    prompts = mixed_prompts(12)
    dual = config_of(decoder="threshold", threshold=0.7, cache="dual")
    vicinity = dataclasses.replace(dual, cache="vicinity", prefix_look=0, after_look=0,
                                   warmup_steps=0)
    for a, b in zip(tiny_engine.generate(prompts, dual), tiny_engine.generate(prompts, vicinity),
                    strict=True):
        assert (a.token_ids, a.nfe) == (b.token_ids, b.nfe)


def test_vicinity_recomputes_its_window_after_warmup(tiny_engine: Engine):
    prompt = PROMPTS[0]
    config = config_of(decoder="fixed", steps=GEN, cache="vicinity", prefix_look=3,
                       after_look=5, warmup_steps=3)
    with recorded(tiny_engine) as calls:
        out = tiny_engine.generate([prompt], config)[0]
    full = len(prompt) + GEN
    per_block = BLOCK  # fixed, one token per step
    expected = []
    for i in range(out.nfe):
        starts_block = i % per_block == 0
        expected.append(full if starts_block or i < 3 else 3 + BLOCK + 5)
    assert [c.kwargs["input_ids"].shape[1] for c in calls] == expected
    # a window running past the row's end is cut there: the last block has no columns after
    last = calls[-1].kwargs["attention_mask"][0, -(3 + BLOCK + 5):]
    assert last.tolist() == [True] * (3 + BLOCK) + [False] * 5


STRATEGIES = [
    dict(decoder="hierarchical", cache="none"),
    dict(decoder="credit", cache="dual"),
    dict(decoder="credit", cache="vicinity", prefix_look=4, after_look=4, warmup_steps=2,
         smoothing=True),
    dict(decoder="hierarchical", cache="prefix", smoothing=True, temperature=1.0, seed=5),
]


@pytest.mark.parametrize("fields", STRATEGIES, ids=lambda f: "-".join(
    str(v) for k, v in f.items() if k in ("decoder", "cache", "smoothing")))
def test_a_row_decodes_the_same_alone_and_in_any_batch(tiny_engine: Engine, fields):
    prompts = mixed_prompts(16)
    config = GenerationConfig(gen_length=16, block_length=4, threshold=0.8, **fields)
    with stops_at(tiny_engine, STOP_AT):
        alone = [tiny_engine.generate([p], config)[0] for p in prompts]
        rolling = tiny_engine.generate(prompts, dataclasses.replace(config, max_batch_size=5))
    for one, in_batch in zip(alone, rolling, strict=True):
        assert (in_batch.token_ids, in_batch.nfe) == (one.token_ids, one.nfe)


def test_credit_state_does_not_leak_to_the_next_request(tiny_engine: Engine):
    """B after A in the same row slot, and B joining a batch where A is mid-answer, both
    decode as B alone (states reset with the row, and with each block)."""
    a, b = PROMPTS[2], PROMPTS[1]
    config = config_of(decoder="credit", threshold=0.8)
    alone = tiny_engine.generate([b], config)[0]
    for size in (1, 2):
        runs = tiny_engine.generate([a, a, b], dataclasses.replace(config, max_batch_size=size))
        assert (runs[2].token_ids, runs[2].nfe) == (alone.token_ids, alone.nfe)


@pytest.mark.parametrize(("fields", "message"), [
    (dict(decoder="greedy"), "unknown decoder 'greedy'"),
    (dict(low_threshold=1.5), "low_threshold must be in [0, 1]"),
    (dict(cont_weight=-0.1), "cont_weight must be in [0, 1]"),
    (dict(prefix_look=-1), "prefix_look must be an integer >= 0"),
    (dict(warmup_steps=1.5), "warmup_steps must be an integer >= 0"),
    (dict(smoothing="yes"), "smoothing must be true or false"),
    (dict(cache="vicinity2"), "unknown cache 'vicinity2'"),
])
def test_strategy_options_are_validated(tiny_engine: Engine, fields, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        tiny_engine.generate([[5]], GenerationConfig(**fields))


def test_service_params_accept_the_engine_choices():
    checked = params.check_params({"decoder": "credit", "cache": "vicinity", "prefix_look": 8,
                                   "after_look": 0, "warmup_steps": 2, "smoothing": True,
                                   "cont_weight": 0.25, "low_threshold": 0.5})
    assert GenerationConfig(**params.engine_fields(checked)).cache == "vicinity"
    for bad in ({"prefix_look": -1}, {"smoothing": 1}, {"low_threshold": 2}):
        with pytest.raises(params.InvalidParam, match=next(iter(bad))):
            params.check_params(bad)
