"""Triton kernels against their PyTorch references (kernels/), on the CPU through Triton's
interpreter (TRITON_INTERPRET=1) or on CUDA when present (benchmarks/gpu_check.sh)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch

if not torch.cuda.is_available():  # must be set before triton compiles any kernel
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from dinfer_kernels import backend  # noqa: E402
from dinfer_kernels.lm_head import lm_head_confidence, lm_head_confidence_reference  # noqa: E402
from dinfer_kernels.moe import fused_moe, fused_moe_reference  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def triton_kernels() -> Iterator[None]:
    with backend.choosing("triton"):
        yield


def steps_of(n: int, step: int = 0) -> torch.Tensor:
    return torch.full((n,), step, dtype=torch.long, device=DEVICE)


def test_backend_choice(monkeypatch: pytest.MonkeyPatch):
    cpu = torch.device("cpu")
    with backend.choosing("torch"):
        assert not backend.use_triton(cpu)
    with backend.choosing("auto"):
        assert not backend.use_triton(cpu)  # auto takes Triton only for CUDA tensors
    with pytest.raises(ValueError, match="kernels='cuda'"), backend.choosing("cuda"):
        backend.use_triton(cpu)
    assert backend.use_triton(cpu)  # the fixture's choice again
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        backend.use_triton(cpu)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n, vocab, dim", [(37, 1000, 40), (16, 256, 64), (1, 77, 16)])
def test_lm_head_greedy_matches_reference(dtype, n, vocab, dim):
    generator = torch.Generator().manual_seed(n + vocab)
    hidden = torch.randn(n, dim, generator=generator).to(DEVICE, dtype)
    weight = torch.randn(vocab, dim, generator=generator).to(DEVICE, dtype)
    unbanned, _ = lm_head_confidence_reference(hidden, weight, None, 0.0, None, steps_of(n))
    banned = int(unbanned[0])  # the first row's favourite: banning it must change its pick
    tokens, confidence = lm_head_confidence(hidden, weight, banned=banned)
    ref_tokens, ref_confidence = lm_head_confidence_reference(hidden, weight, banned, 0.0,
                                                              None, steps_of(n))
    assert tokens.dtype == torch.long and confidence.dtype == torch.float32
    assert torch.equal(tokens, ref_tokens)
    assert (tokens != banned).all()
    torch.testing.assert_close(confidence, ref_confidence, rtol=1e-5, atol=0)


def test_lm_head_ties_resolve_like_torch_argmax():
    """Equal logits in one tile, in different tiles and in different vocabulary splits:
    the lowest index wins, as torch.argmax; the banned token is skipped, not its ties."""
    vocab, dim = 700, 32
    generator = torch.Generator().manual_seed(1)
    weight = torch.randint(-2, 3, (vocab, dim), generator=generator).float()
    tied = [20, 10, 300, 650]  # 10 and 20 share a tile; 300 and 650 lie in later splits
    weight[tied] = 5.0  # integer maths: the tied logits are exactly equal
    hidden = torch.ones(3, dim)
    hidden, weight = hidden.to(DEVICE), weight.to(DEVICE)
    for banned, winner in [(None, 10), (10, 20), (5, 10)]:
        tokens, confidence = lm_head_confidence(hidden, weight, banned=banned)
        ref_tokens, ref_confidence = lm_head_confidence_reference(hidden, weight, banned, 0.0,
                                                                  None, steps_of(3))
        assert tokens.tolist() == ref_tokens.tolist() == [winner] * 3
        torch.testing.assert_close(confidence, ref_confidence, rtol=1e-5, atol=0)


def sampling_case(n: int = 29, vocab: int = 300, dim: int = 24):
    """Hidden rows that all favour token 7 by far, so banning 7 is visible."""
    generator = torch.Generator().manual_seed(2)
    base = torch.randn(dim, generator=generator)
    hidden = base + 0.3 * torch.randn(n, dim, generator=generator)
    weight = torch.randn(vocab, dim, generator=generator) / 2
    weight[7] = base
    seeds = torch.randint(-2**62, 2**62, (n,), generator=generator)
    steps = torch.randint(0, 50, (n,), generator=generator)
    return hidden.to(DEVICE), weight.to(DEVICE), seeds.to(DEVICE), steps.to(DEVICE)


def test_sampling_matches_reference_and_ignores_batch_mates():
    hidden, weight, seeds, steps = sampling_case()
    temperature = 0.8
    free, _ = lm_head_confidence(hidden, weight, temperature=temperature, seeds=seeds,
                                 step=steps)
    assert (free == 7).float().mean() > 0.5  # the favourite, while it is allowed
    tokens, confidence = lm_head_confidence(hidden, weight, banned=7, temperature=temperature,
                                            seeds=seeds, step=steps)
    ref_tokens, ref_confidence = lm_head_confidence_reference(hidden, weight, 7, temperature,
                                                              seeds, steps)
    assert torch.equal(tokens, ref_tokens)
    assert (tokens != 7).all()
    torch.testing.assert_close(confidence, ref_confidence, rtol=1e-5, atol=0)
    alone, _ = lm_head_confidence(hidden[5:9], weight, banned=7, temperature=temperature,
                                  seeds=seeds[5:9], step=steps[5:9])
    assert torch.equal(alone, tokens[5:9])  # a row's draw depends on its seed and step only
    later, _ = lm_head_confidence(hidden, weight, banned=7, temperature=temperature,
                                  seeds=seeds, step=steps + 1)
    assert not torch.equal(later, tokens)  # the step changes the noise


CHI_SQUARE_999 = 20.52  # chi-square quantile 0.999 at 5 degrees of freedom


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def test_sampling_follows_softmax_over_temperature():
    """2,000 seeds drawing from one row of six logits: the counts fit
    softmax(logits / T) (chi-square, fixed seeds: deterministic) and clearly do not fit
    softmax(logits), so the test can tell the two apart."""
    samples, temperature = 2000, 0.5
    logit_row = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, -1.0])
    weight = torch.zeros(6, 16)
    weight[:, :6] = torch.diag(logit_row)  # a hidden row of six ones -> exactly these logits
    hidden = torch.zeros(samples, 16)
    hidden[:, :6] = 1.0
    seeds = torch.arange(samples, dtype=torch.long) * 7919 + 13
    tokens, _ = lm_head_confidence(hidden.to(DEVICE), weight.to(DEVICE),
                                   temperature=temperature, seeds=seeds.to(DEVICE), step=3)
    counts = torch.bincount(tokens.cpu(), minlength=6).double()
    logits = (hidden[:1] @ weight.T)[0].double()
    assert torch.allclose(logits, logit_row.double())
    assert chi_square(counts, torch.softmax(logits / temperature, 0)) < CHI_SQUARE_999
    assert chi_square(counts, torch.softmax(logits, 0)) > 10 * CHI_SQUARE_999


def moe_case(tokens: int, hidden: int, inter: int, experts: int, k: int, dtype: torch.dtype,
             seed: int = 0):
    """Random routing that never picks the last expert (an expert with no tokens)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=generator)
    w13 = torch.randn(experts, 2 * inter, hidden, generator=generator) / hidden ** 0.5
    w2 = torch.randn(experts, hidden, inter, generator=generator) / inter ** 0.5
    ids = torch.stack([torch.randperm(experts - 1, generator=generator)[:k]
                       for _ in range(tokens)])
    weights = torch.softmax(torch.randn(tokens, k, generator=generator), dim=-1)
    return (x.to(DEVICE, dtype), w13.to(DEVICE, dtype), w2.to(DEVICE, dtype), ids.to(DEVICE),
            weights.to(DEVICE))


# relative to the output's largest magnitude: fp32 to 1e-5; fp16/bf16 round the
# activations between the GEMMs and the output, where summation order can move an ulp
MOE_TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens, hidden, inter, experts, k", [
    (19, 40, 24, 9, 8), (19, 40, 24, 9, 1), (40, 32, 16, 3, 2)])
def test_fused_moe_matches_reference(dtype, tokens, hidden, inter, experts, k, activation):
    args = moe_case(tokens, hidden, inter, experts, k, dtype)
    out = fused_moe(*args, activation=activation)
    ref = fused_moe_reference(*args, activation=activation)
    assert out.dtype == dtype and out.shape == (tokens, hidden)
    error = (out.float() - ref.float()).abs().max() / ref.float().abs().max()
    assert error <= MOE_TOLERANCE[dtype]


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """The published formula: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x + 0.044715 * x ** 3)))


@pytest.mark.parametrize("activation, act", [("silu", lambda g: g * torch.sigmoid(g)),
                                             ("gelu_tanh", gelu_tanh)])
def test_fused_moe_reference_is_the_formula(activation, act):
    """The reference itself, token by token from the published gated-experts formula
    (SwiGLU; Gemma's GELU-tanh)."""
    x, w13, w2, ids, weights = moe_case(5, 8, 4, 4, 2, torch.float32)
    out = fused_moe_reference(x, w13, w2, ids, weights, activation)
    for t in range(5):
        expected = torch.zeros(8, device=DEVICE)
        for slot in range(2):
            e = int(ids[t, slot])
            gate, up = w13[e, :4] @ x[t], w13[e, 4:] @ x[t]
            expected += weights[t, slot] * (w2[e] @ (act(gate) * up))
        torch.testing.assert_close(out[t], expected, rtol=1e-5, atol=1e-6)


def test_fused_moe_refuses_an_unknown_activation():
    with pytest.raises(ValueError, match="activation 'relu': not one of silu, gelu_tanh"):
        fused_moe(*moe_case(2, 8, 4, 4, 2, torch.float32), activation="relu")



@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the tests above compile them")
def test_kernels_compile_for_hopper_without_a_gpu():
    """The interpreter runs the kernels as Python and forgives what the compiler does not
    (non-constexpr globals, types); compile them for sm_90 in a process without it."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-m", "tests.compile_kernels"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["lm_head", "moe_gated", "moe_gated_gelu", "moe_down"]
