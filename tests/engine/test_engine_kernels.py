"""The engine through the Triton kernels (its kernels="triton"; Triton's
interpreter on the CPU) against its PyTorch path, on the tiny LLaDA-layout checkpoint."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():  # must be set before triton compiles any kernel
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from dinfer_engine import Engine, GenerationConfig  # noqa: E402
from dinfer_kernels import lm_head_triton, moe_triton  # noqa: E402
from tests.engine_requests import asked
from tests.tiny_diffusion_gemma import write_tiny_diffusion_gemma  # noqa: E402
from tests.tiny_moe import write_tiny_moe  # noqa: E402

PROMPTS = [[5, 9, 12, 7], [20, 21], [8] * 11, [30, 4, 17]]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="module")
def engine(tiny_checkpoint) -> Engine:
    """fp32 on the GPU too: the kernel and the torch path then share their precision."""
    return Engine.from_pretrained(tiny_checkpoint, device=DEVICE, dtype=torch.float32)


def generate(engine: Engine, kernels: str, config: GenerationConfig,
             monkeypatch: pytest.MonkeyPatch, prompts: list[list[int]] = PROMPTS,
             seeds: list[int] | None = None) -> list[list[int]]:
    monkeypatch.setattr(engine, "kernels", kernels)
    results = engine.generate(asked(prompts, seeds=seeds), config)
    return [r.token_ids for r in results]


@pytest.mark.parametrize("decoder, cache", [("fixed", "none"), ("threshold", "dual"),
                                            ("threshold", "prefix"),
                                            ("hierarchical", "vicinity"),
                                            ("editing", "dual")])
def test_greedy_generations_equal_torch_path(engine: Engine, decoder, cache,
                                             monkeypatch: pytest.MonkeyPatch):
    config = GenerationConfig(gen_length=16, block_length=8, steps=8, decoder=decoder,
                              threshold=0.3, cache=cache, max_batch_size=3, early_stop=False)
    torch_ids = generate(engine, "torch", config, monkeypatch)
    calls = []
    kernel = lm_head_triton.lm_head_confidence
    monkeypatch.setattr(lm_head_triton, "lm_head_confidence",
                        lambda *args: calls.append(1) or kernel(*args))  # counts, then runs
    triton_ids = generate(engine, "triton", config, monkeypatch)
    assert calls  # the kernel really ran
    assert triton_ids == torch_ids
    assert len({tuple(ids) for ids in torch_ids}) > 1  # not a degenerate constant answer


def test_kernel_sampling_is_seeded_and_batch_invariant(engine: Engine,
                                                       monkeypatch: pytest.MonkeyPatch):
    config = GenerationConfig(gen_length=16, block_length=8, decoder="threshold",
                              threshold=0.3, temperature=1.0, early_stop=False)
    seeds = [11, 12, 13, 14]
    together = generate(engine, "triton", config, monkeypatch, seeds=seeds)
    alone = generate(engine, "triton", config, monkeypatch, PROMPTS[2:3], seeds[2:3])
    assert alone == together[2:3]
    reseeded = generate(engine, "triton", config, monkeypatch, seeds=[21, 22, 23, 24])
    assert reseeded != together
    # a different noise source from the torch path's generators: different draws
    assert together != generate(engine, "torch", config, monkeypatch, seeds=seeds)
    assert together != generate(engine, "triton", GenerationConfig(
        gen_length=16, block_length=8, decoder="threshold", threshold=0.3, early_stop=False),
        monkeypatch)  # sampling at temperature 1 is not the greedy answer


@pytest.mark.parametrize("family, decoder", [("llada_moe", "fixed"), ("llada2", "threshold"),
                                             ("llada2", "editing")])
def test_moe_families_greedy_equal_torch_path(tmp_path, family, decoder,
                                              monkeypatch: pytest.MonkeyPatch):
    """Both kernels in play: the fused head, and fused_moe in every MoE layer."""
    engine = Engine.from_pretrained(write_tiny_moe(tmp_path / family, family), device=DEVICE,
                                    dtype=torch.float32)
    config = GenerationConfig(gen_length=16, block_length=8, steps=8, decoder=decoder,
                              threshold=0.3, max_batch_size=2, early_stop=False)
    torch_ids = generate(engine, "torch", config, monkeypatch, PROMPTS[:3])
    calls = []
    kernel = moe_triton.fused_moe
    monkeypatch.setattr(moe_triton, "fused_moe",
                        lambda *args: calls.append(1) or kernel(*args))  # counts, then runs
    triton_ids = generate(engine, "triton", config, monkeypatch, PROMPTS[:3])
    assert calls
    assert triton_ids == torch_ids


@pytest.mark.parametrize("shape", ["small", "moe"])
def test_diffusion_gemma_experts_on_the_kernel_equal_torch_path(
        tmp_path, shape, monkeypatch: pytest.MonkeyPatch):
    """DiffusionGemma's experts through fused_moe (GELU-tanh) in the encoder and every
    decoder step: the same answers as its own expert loop. Its softcapped head stays on
    torch: the step needs every probability (self-conditioning, the row generator's
    sample), not one token per position (ADR 037)."""
    path = write_tiny_diffusion_gemma(tmp_path / shape, shape=shape)
    engine = Engine.from_pretrained(path, device=DEVICE, dtype=torch.float32)
    prompts = [[4 + (seed * 7 + i * 3) % 40 for i in range(6 + seed)] for seed in range(3)]
    config = GenerationConfig(gen_length=16, max_batch_size=2)
    torch_ids = generate(engine, "torch", config, monkeypatch, prompts, seeds=[0, 1, 2])
    calls = []
    kernel = moe_triton.fused_moe
    monkeypatch.setattr(moe_triton, "fused_moe",
                        lambda *args: calls.append(args[-1]) or kernel(*args))
    triton_ids = generate(engine, "triton", config, monkeypatch, prompts, seeds=[0, 1, 2])
    assert calls and set(calls) == {"gelu_tanh"}
    assert triton_ids == torch_ids


@pytest.mark.skipif(DEVICE == "cuda", reason="ranks on GPUs: benchmarks/gpu_check.sh")
@pytest.mark.slow
def test_diffusion_gemma_experts_on_the_kernel_at_two_ranks(tmp_path):
    """Each rank's share of the experts through fused_moe (the other ranks' weighted 0),
    summed across 2 gloo ranks: one rank's answers on the torch path."""
    path = write_tiny_diffusion_gemma(tmp_path / "moe", shape="moe", seed=2, vocab_size=48)
    prompts = [[4 + (seed * 7 + i * 3) % 40 for i in range(6 + seed)] for seed in range(4)]
    config, seeds = GenerationConfig(gen_length=16), [0, 1, 2, 3]
    one = Engine.from_pretrained(path, kernels="torch").generate(asked(prompts, seeds=seeds),
                                                                 config)
    with Engine.from_pretrained(path, tensor_parallel=2, kernels="triton") as two:
        got = two.generate(asked(prompts, seeds=seeds), config)
    assert [r.token_ids for r in got] == [r.token_ids for r in one]


def test_llada2_prefix_cache_on_the_triton_path(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """Rows reusing cached prompt blocks (dinfer_engine/prefix_cache.py) through both kernels
    decode as the torch path without the cache."""
    plain = Engine.from_pretrained(write_tiny_moe(tmp_path / "llada2", "llada2"),
                                   device=DEVICE, dtype=torch.float32)
    cached = Engine(plain.model, plain.tokenizer, plain.model_defaults,
                    prefix_cache_bytes=1 << 20)
    shared = [5, 9, 12, 7, 30, 11, 3, 8, 20, 21]
    prompts = [shared + [6], shared + [17, 4], [8] * 11, shared[:8]]
    config = GenerationConfig(gen_length=8, block_length=4, threshold=0.3, early_stop=False)
    torch_ids = generate(plain, "torch", config, monkeypatch, prompts)
    monkeypatch.setattr(cached, "kernels", "triton")
    for _ in range(2):  # rows of one batch share, then a later call reuses every block
        results = cached.generate(prompts, config)
        assert [r.token_ids for r in results] == torch_ids
    assert [r.prefix_tokens_reused for r in results] == [8, 12, 8, 8]  # whole blocks


@pytest.mark.parametrize("fields", [
    dict(temperature=1.0, top_k=4, top_p=0.8, logprobs=True, top_logprobs=2),
    dict(decoder="credit", threshold=0.5),
    dict(decoder="threshold", threshold=0.5, smoothing=True),
], ids=["top-k-top-p-logprobs", "credit", "smoothing"])
def test_what_reads_the_logits_takes_the_torch_path(engine: Engine, fields,
                                                    monkeypatch: pytest.MonkeyPatch):
    """The fused LM head never builds the whole distribution these need."""
    config = GenerationConfig(gen_length=16, block_length=8, early_stop=False, **fields)
    calls = []
    monkeypatch.setattr(lm_head_triton, "lm_head_confidence", lambda *a: calls.append(1))
    runs = {}
    for kernels in ("triton", "torch"):
        monkeypatch.setattr(engine, "kernels", kernels)
        runs[kernels] = engine.generate(asked(PROMPTS, seeds=[1, 2, 3, 4]), config)
    assert calls == []
    for kernel_run, torch_run in zip(runs["triton"], runs["torch"], strict=True):
        assert kernel_run.token_ids == torch_run.token_ids
        assert kernel_run.logprobs == torch_run.logprobs
