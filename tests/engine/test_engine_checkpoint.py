"""Loading real-layout checkpoints, and every way a checkpoint directory can be wrong."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from dinfer_engine import CheckpointError, Engine
from dinfer_engine.loading.checkpoint import INDEX_FILE
from tests.tiny_model import write_tiny_checkpoint


@pytest.fixture
def broken(tiny_checkpoint: Path, tmp_path: Path) -> Path:
    """A private copy of the tiny checkpoint to damage."""
    return Path(shutil.copytree(tiny_checkpoint, tmp_path / "copy"))


def shards(directory: Path) -> list[Path]:
    return sorted(directory.glob("model-*.safetensors"))


def test_sharded_checkpoint_loads_every_tensor(tiny_checkpoint: Path, tiny_engine: Engine):
    assert len(shards(tiny_checkpoint)) > 1
    assert (tiny_checkpoint / INDEX_FILE).is_file()
    stored = {}
    for shard in shards(tiny_checkpoint):
        stored.update(load_file(shard))
    params = dict(tiny_engine.model.named_parameters())
    assert set(stored) == set(params)
    assert "model.transformer.blocks.1.ff_proj.weight" in params
    for name, tensor in stored.items():
        assert torch.equal(params[name], tensor)


def test_tied_single_file_checkpoint_loads(tmp_path: Path):
    directory = write_tiny_checkpoint(tmp_path / "tied", max_shard_bytes=None, weight_tying=True)
    assert (directory / "model.safetensors").is_file() and not shards(directory)
    model = Engine.from_pretrained(directory).model
    assert "model.transformer.ff_out.weight" not in dict(model.named_parameters())
    assert model(torch.tensor([[5, 6]])).logits.shape == (1, 2, model.config.vocab_size)


def test_missing_directory(tmp_path: Path):
    with pytest.raises(CheckpointError, match="does not exist"):
        Engine.from_pretrained(tmp_path / "nowhere")


def test_missing_config(broken: Path):
    (broken / "config.json").unlink()
    with pytest.raises(CheckpointError, match="no config.json"):
        Engine.from_pretrained(broken)


def test_unknown_model_type(broken: Path):
    config = json.loads((broken / "config.json").read_text())
    config["model_type"] = "gpt2"
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="unknown model_type 'gpt2'"):
        Engine.from_pretrained(broken)


def test_missing_shard(broken: Path):
    shards(broken)[-1].unlink()
    with pytest.raises(CheckpointError, match="shard.*missing"):
        Engine.from_pretrained(broken)


def test_no_weights_at_all(broken: Path):
    for shard in shards(broken):
        shard.unlink()
    (broken / INDEX_FILE).unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        Engine.from_pretrained(broken)


def test_shape_mismatch(broken: Path):
    config = json.loads((broken / "config.json").read_text())
    config["mlp_hidden_size"] *= 2
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"has shape \(64, 32\), config.json implies"):
        Engine.from_pretrained(broken)


def test_missing_tensor(broken: Path):
    index = json.loads((broken / INDEX_FILE).read_text())
    name = "model.transformer.blocks.1.up_proj.weight"
    shard = broken / index["weight_map"][name]
    tensors = load_file(shard)
    del tensors[name]
    save_file(tensors, shard)
    del index["weight_map"][name]
    (broken / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=f"missing 1 tensor.*{name}"):
        Engine.from_pretrained(broken)


def test_unexpected_tensor(broken: Path):
    config = json.loads((broken / "config.json").read_text())
    config["n_layers"] = 1
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="unexpected .* tensor"):
        Engine.from_pretrained(broken)


def test_missing_tokenizer(broken: Path):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (broken / name).unlink()
    with pytest.raises(CheckpointError, match="cannot load the tokenizer"):
        Engine.from_pretrained(broken)
