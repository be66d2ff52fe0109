"""LLaDA-MoE and LLaDA2 from tiny random checkpoints in their real layouts, against the
slow float64 references of tests/moe_reference.py: logits, greedy generations, LLaDA2's
block diffusion with its cache against recomputing the whole window, early stop, batch
invariance, and checkpoints that are wrong."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from dinfer_engine import CheckpointError, Engine, GenerationConfig
from dinfer_engine.models.llada2 import LLaDA2MoeModelLM
from dinfer_engine.models.llada_moe import LLaDAMoEModelLM
from tests.engine.test_engine_batching import mixed_prompts, stops_at
from tests.engine.test_engine_decoding import llada_generate, threshold_generate
from tests.moe_reference import ReferenceMoE, block_causal_mask, llada2_generate
from tests.tiny_model import EOS_ID, MASK_ID
from tests.tiny_moe import write_tiny_moe

VARIANTS = {
    "llada_moe": {"family": "llada_moe"},
    # fused experts, a shared expert, no expert bias, partial RoPE, the other model_type
    "llada_moe_fused": {"family": "llada_moe", "fused": True, "model_type": "lladamoe",
                        "shared_expert_intermediate_size": 24,
                        "moe_router_enable_expert_bias": False, "partial_rotary_factor": 0.5},
    "llada2": {"family": "llada2"},
    "llada2_fused": {"family": "llada2", "fused": True, "seed": 1},
}
PROMPTS = [[5, 9, 12, 7, 30], [20, 21, 22, 23, 24, 25, 26, 27], [8]]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("moe")
    return {name: write_tiny_moe(root / name, **options) for name, options in VARIANTS.items()}


@pytest.fixture(scope="module")
def engines(checkpoints: dict[str, Path]) -> dict[str, Engine]:
    return {name: Engine.from_pretrained(path) for name, path in checkpoints.items()}


def full_window(engine: Engine, block_length: int):
    """The engine's model recomputing the whole window under the block-causal mask."""

    def forward(ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(len(ids))[None]
        return engine.model(ids[None], position_ids=positions,
                            attention_mask=block_causal_mask(len(ids), block_length)[None],
                            logits_index=positions).logits[0]

    return forward


def until_eos(tokens: list[int]) -> list[int]:
    return tokens[:tokens.index(EOS_ID)] if EOS_ID in tokens else tokens


@pytest.mark.parametrize("name", list(VARIANTS))
def test_logits_match_reference(checkpoints, engines, name):
    ids = torch.tensor([5, 9, 3, 3, 3, 17, 3, 22, 30, 31, 3, 3, 12])
    reference = ReferenceMoE(checkpoints[name])
    block = 4 if reference.llada2 else None
    mask = block_causal_mask(len(ids), 4)[None] if block else None
    got = engines[name].model(ids[None], attention_mask=mask).logits[0]
    want = reference.logits(ids, block)
    assert want.abs().max() > 10  # peaky logits: a wrong router or norm is far off
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)


def test_families_recognised_with_mask_id_from_the_tokenizer(checkpoints, engines):
    for name, family in (("llada_moe", LLaDAMoEModelLM), ("llada_moe_fused", LLaDAMoEModelLM),
                         ("llada2", LLaDA2MoeModelLM)):
        config = json.loads((checkpoints[name] / "config.json").read_text())
        assert "mask_token_id" not in config
        assert type(engines[name].model) is family
        assert (engines[name].mask_id, engines[name].eos_id) == (MASK_ID, EOS_ID)
    # LLaDA2 checkpoints carry a multi-token-prediction layer the engine leaves out
    stored = load_file(checkpoints["llada2"] / "model.safetensors")
    assert any(n.startswith("model.layers.3.") for n in stored)
    assert len(engines["llada2"].model.model.layers) == 3


@pytest.mark.parametrize("name", ["llada_moe", "llada_moe_fused"])
def test_llada_moe_greedy_matches_reference(checkpoints, engines, name):
    reference = ReferenceMoE(checkpoints[name])
    fixed = GenerationConfig(gen_length=8, block_length=4, steps=8, decoder="fixed",
                             early_stop=False)
    threshold = GenerationConfig(gen_length=8, block_length=4, decoder="threshold",
                                 threshold=0.7, early_stop=False)
    prompts = PROMPTS[:2]
    for prompt, out in zip(prompts, engines[name].generate(prompts, fixed), strict=True):
        assert out.token_ids == llada_generate(reference, prompt, 8, 8, 4)
    for prompt, out in zip(prompts, engines[name].generate(prompts, threshold), strict=True):
        assert (out.token_ids, out.nfe) == threshold_generate(reference, prompt, 8, 4, 0.7)


@pytest.mark.parametrize(("decoder", "steps"), [("threshold", 8), ("fixed", 4)])
def test_llada2_block_diffusion_matches_reference(checkpoints, engines, decoder, steps):
    """Prompts ending mid-block, on a block boundary, and after one token; the engine runs
    its cache, the reference recomputes the window every step."""
    reference = ReferenceMoE(checkpoints["llada2"])
    config = GenerationConfig(gen_length=8, block_length=4, steps=steps, decoder=decoder,
                              threshold=0.8, early_stop=False)
    outs = engines["llada2"].generate(PROMPTS, config)
    for prompt, out in zip(PROMPTS, outs, strict=True):
        tokens, forwards = llada2_generate(lambda ids: reference.logits(ids, 4), prompt, 8, 4,
                                           steps // 2, 0.8 if decoder == "threshold" else None)
        assert (out.token_ids, out.nfe) == (tokens, forwards)


@pytest.mark.parametrize("name", ["llada2", "llada2_fused"])
@pytest.mark.parametrize(("decoder", "block", "steps"),
                         [("threshold", 8, 32), ("fixed", 8, 16), ("threshold", 4, 8)])
def test_llada2_cache_equals_recomputing_the_window(engines, name, decoder, block, steps):
    engine = engines[name]
    config = GenerationConfig(gen_length=32, block_length=block, steps=steps, decoder=decoder,
                              threshold=0.9, early_stop=False)
    prompts = mixed_prompts(6)
    outs = engine.generate(prompts, config)
    for prompt, out in zip(prompts, outs, strict=True):
        expected = llada2_generate(full_window(engine, block), prompt, 32, block,
                                   steps // (32 // block),
                                   0.9 if decoder == "threshold" else None)
        assert (out.token_ids, out.nfe) == expected


def test_llada2_computes_each_committed_block_once(engines):
    """Span widths for a 6-token prompt, blocks of 4, gen 8: blocks 1..3 are decoded, 2
    tokens a step with fixed. Block 1 (prompt tail and 2 masks) takes one forward over
    the prompt's blocks and itself; each later block starts with a forward over the
    block just finished (storing its final keys/values) and itself, then itself alone."""
    engine, widths = engines["llada2"], []
    handle = engine.model.register_forward_hook(
        lambda module, args, kwargs, output: widths.append(
            (args[0] if args else kwargs["input_ids"]).shape[1]), with_kwargs=True)
    try:
        out = engine.generate([[5, 6, 7, 8, 9, 10]], GenerationConfig(
            gen_length=8, block_length=4, steps=4, decoder="fixed", early_stop=False))[0]
    finally:
        handle.remove()
    assert widths == [8, 8, 4, 8, 4] and out.nfe == 5


def test_llada2_early_stop_gives_the_published_answer(engines):
    """The published generate finishes the block where EOS first appears, then cuts the
    answer at that EOS; ours stops as soon as the answer before EOS is complete."""
    engine = engines["llada2"]
    config = GenerationConfig(gen_length=32, block_length=8, steps=32, decoder="threshold",
                              threshold=0.9)
    prompts = [[5, 9, 12, 7], [20] * 9, [8, 8]]
    with stops_at(engine, 18):
        early = engine.generate(prompts, config)
        for prompt, out in zip(prompts, early, strict=True):
            tokens, forwards = llada2_generate(full_window(engine, 8), prompt, 32, 8, 8, 0.9,
                                               eos_id=EOS_ID)
            assert out.finish_reason == "stop"
            assert out.token_ids == until_eos(tokens)
            assert out.text == engine.tokenizer.decode(until_eos(tokens),
                                                       skip_special_tokens=True)
            assert out.nfe <= forwards


@pytest.mark.parametrize(("name", "config"), [
    ("llada_moe", GenerationConfig(gen_length=16, block_length=4, decoder="threshold",
                                   threshold=0.8, cache="dual")),
    ("llada_moe_fused", GenerationConfig(gen_length=16, block_length=8, steps=8,
                                         cache="prefix")),
    ("llada2", GenerationConfig(gen_length=16, block_length=4, threshold=0.8)),
    ("llada2_fused", GenerationConfig(gen_length=16, block_length=8, steps=8, decoder="fixed",
                                      temperature=1.0, seed=3)),
    ("llada_moe", GenerationConfig(gen_length=16, block_length=4, decoder="hierarchical",
                                   threshold=0.8, cache="vicinity", prefix_look=2,
                                   after_look=2, warmup_steps=2, smoothing=True)),
    ("llada2", GenerationConfig(gen_length=16, block_length=4, decoder="credit",
                                threshold=0.8, smoothing=True)),
], ids=["moe-threshold-dual", "moe-fused-prefix", "llada2-threshold", "llada2-sampled",
        "moe-hierarchical-vicinity-smoothing", "llada2-credit-smoothing"])
def test_batch_invariance(engines, name, config):
    engine, prompts = engines[name], mixed_prompts(24)
    with stops_at(engine, 18):
        alone = [engine.generate([p], config)[0] for p in prompts]
        together = engine.generate(prompts, config)
        rolling = engine.generate(prompts, GenerationConfig(**{**config.__dict__,
                                                               "max_batch_size": 5}))
    assert {o.finish_reason for o in alone} == {"stop", "length"}
    for one, in_batch, in_rolling in zip(alone, together, rolling, strict=True):
        assert in_batch.token_ids == one.token_ids == in_rolling.token_ids
        assert in_batch.nfe == one.nfe == in_rolling.nfe


@pytest.mark.parametrize(("name", "tensor"), [
    ("llada_moe", "model.layers.2.mlp.experts.5.up_proj.weight"),
    ("llada2", "model.layers.1.mlp.experts.7.down_proj.weight"),
    ("llada2_fused", "model.layers.2.mlp.w2"),
])
def test_a_missing_expert_tensor_is_a_checkpoint_error(checkpoints, tmp_path, name, tensor):
    directory = Path(shutil.copytree(checkpoints[name], tmp_path / name))
    tensors = load_file(directory / "model.safetensors")
    del tensors[tensor]
    save_file(tensors, directory / "model.safetensors")
    with pytest.raises(CheckpointError, match=f"missing 1 tensor.*{tensor}"):
        Engine.from_pretrained(directory)


def test_no_mask_token_anywhere_is_a_checkpoint_error(checkpoints, tmp_path):
    directory = Path(shutil.copytree(checkpoints["llada2"], tmp_path / "nomask"))
    tokenizer_config = json.loads((directory / "tokenizer_config.json").read_text())
    tokenizer_config.pop("mask_token")
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    with pytest.raises(CheckpointError, match="no mask token id"):
        Engine.from_pretrained(directory)


def test_sharded_checkpoint_loads_the_same_model(checkpoints, engines, tmp_path):
    """The same LLaDA2 tensors split over shards with an index, as save_pretrained does."""
    directory = Path(shutil.copytree(checkpoints["llada2"], tmp_path / "sharded"))
    tensors = load_file(directory / "model.safetensors")
    (directory / "model.safetensors").unlink()
    names = sorted(tensors)
    weight_map = {}
    for i in range(3):
        shard = f"model-{i + 1:05d}-of-00003.safetensors"
        part = {n: tensors[n] for n in names[i::3]}
        save_file(part, directory / shard)
        weight_map.update(dict.fromkeys(part, shard))
    (directory / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": weight_map}))
    loaded = dict(Engine.from_pretrained(directory).model.named_parameters())
    for name, param in engines["llada2"].model.named_parameters():
        assert torch.equal(loaded[name], param), name
