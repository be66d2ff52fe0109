"""DiffusionGemma on the fixed grid (docs/adr/034-fixed-grid.md): a row's numbers do not
depend on its neighbours, on their cache lengths or on the batch size, with one thread
and with the default threads; long prompts (past the sliding window, of several lengths)
make the caches of a batch differ in length, which left padding used to turn into other
bits."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from dinfer_engine.uniform_generation import expected_embedding
from tests.engine.test_engine_diffusion_gemma import run_rows
from tests.tiny_diffusion_gemma import write_tiny_diffusion_gemma

LENGTHS = (65, 97, 130, 6, 140, 70, 65, 97)
# "wide": the widths where the CPU's matrix products change their reduction order with
# the number of rows (hidden 512; full layers' heads and the dense MLP 1024 deep)
WIDE = {"hidden": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
        "layer_types": ["sliding_attention", "full_attention"], "head_dim": 64,
        "global_head_dim": 128, "num_experts": 8, "top_k_experts": 2, "sliding_window": 32,
        "canvas_length": 16, "vocab_size": 600}
SHAPES = {"small": {}, "moe": {"shape": "moe"}, "wide": {"shape": "moe", **WIDE}}


@pytest.fixture(params=[1, None], ids=["1-thread", "default-threads"])
def threads(request: Any) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(request.param or before)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module", params=list(SHAPES))
def engine(request: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from dinfer_engine import Engine
    directory = write_tiny_diffusion_gemma(tmp_path_factory.mktemp(request.param),
                                           **SHAPES[request.param])
    return Engine.from_pretrained(directory)


def prompt(seed: int, length: int) -> list[int]:
    return [4 + (seed * 7 + i * 3) % 40 for i in range(length)]


@pytest.mark.parametrize("depth, rows", [(32, 8), (512, 512), (1024, 512), (2048, 64)])
def test_linear_rows_do_not_depend_on_the_row_count(threads: None, depth: int, rows: int
                                                    ) -> None:
    from dinfer_engine.models.fixed_grid import linear

    generator = torch.Generator().manual_seed(depth)
    x = torch.randn(1024, depth, generator=generator)
    weight = torch.randn(rows, depth, generator=generator)
    whole = linear(x, weight)
    for count in (1, 3, 8, 15, 16, 17, 64, 257):
        assert torch.equal(linear(x[:count], weight), whole[:count]), count


def test_the_self_conditioning_product_of_a_row_does_not_depend_on_the_batch(threads: None
                                                                            ) -> None:
    """The loop's probs x embedding table (computed outside denoise) on the grid: a
    row's one position alone (a plain product takes another kernel) or among 8 rows,
    4096 vocabulary entries deep."""
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(4096, 1024, generator=generator)
    probs = torch.softmax(3 * torch.randn(8, 1, 4096, generator=generator), dim=-1)
    model = SimpleNamespace(head_weight=lambda: table)
    whole = expected_embedding(model, probs)  # type: ignore[arg-type]
    for b in range(len(probs)):
        assert torch.equal(expected_embedding(model, probs[b:b + 1]),  # type: ignore[arg-type]
                           whole[b:b + 1]), b


@torch.inference_mode()
def test_a_rows_logits_are_the_same_bits_alone_and_in_any_batch(threads: None,
                                                                engine: Any) -> None:
    model = engine.model
    length, vocab = model.config.canvas_length, model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    caches: list[Any] = []
    for seed, n in enumerate(LENGTHS):
        caches.append([])
        model.encode(caches[-1], torch.tensor([prompt(seed, n)]), 0)
    canvases = torch.randint(0, vocab, (len(LENGTHS), length), generator=generator)
    positions = torch.stack([torch.arange(n, n + length) for n in LENGTHS])
    probs = torch.softmax(3 * torch.randn(len(LENGTHS), length, vocab, generator=generator),
                          dim=-1)
    def logits(rows: slice, conditioning: torch.Tensor | None) -> torch.Tensor:
        """The rows' logits, their self-conditioning product computed for them alone."""
        return model.logits(model.denoise(canvases[rows], caches[rows], positions[rows], None
                                          if conditioning is None else expected_embedding(
                                              model, conditioning[rows])))

    for conditioning in (None, probs):
        alone = torch.cat([logits(slice(b, b + 1), conditioning)
                           for b in range(len(LENGTHS))])
        assert torch.equal(logits(slice(None), conditioning), alone)
        assert torch.equal(torch.cat([logits(slice(b, b + 3), conditioning)
                                      for b in (0, 3, 6)]), alone)
    # rows at their first step beside rows reading another row's conditioning
    rows = torch.tensor([2, -1, 0, -1, 5, 1, -1, 7])
    mixed = model.logits(model.denoise(canvases, caches, positions,
                                       expected_embedding(model, probs), rows))
    for b, source in enumerate(rows.tolist()):
        single = model.logits(model.denoise(
            canvases[b:b + 1], caches[b:b + 1], positions[b:b + 1],
            None if source < 0 else expected_embedding(model, probs[source:source + 1])))
        assert torch.equal(mixed[b:b + 1], single)


def test_rows_with_long_prompts_equal_their_batch_size_1_runs(threads: None,
                                                              engine: Any) -> None:
    """Several canvases; rows leave and join with a small batch, all at once with a large."""
    seeds = list(range(len(LENGTHS)))
    prompts = [prompt(s, n) for s, n in zip(seeds, LENGTHS, strict=True)]
    alone = [run_rows(engine, [p], [s])[0].answer for p, s in zip(prompts, seeds,
                                                                   strict=True)]
    for size in (2, 3, 64):
        assert [row.answer for row in run_rows(engine, prompts, seeds, size)] == alone
