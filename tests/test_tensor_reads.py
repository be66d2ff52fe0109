"""engine/loading/tensor_reads.py against the safetensors library's own reader: whole
tensors and slices along every dimension, in every dtype a checkpoint holds, from a file
the library wrote; a rank's peak memory holds no mapped file pages."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from engine.loading import tensor_reads
from engine.loading.tensor_reads import TensorFile
from engine.models.config import CheckpointError

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.uint8, torch.bool]


def tensors() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    found = {}
    for dtype in DTYPES:
        for shape in ((12,), (6, 10), (4, 6, 10), (0, 3), ()):
            values = torch.randn(shape, generator=generator) * 50
            name = f"{dtype}".split(".")[1] + "x".join(map(str, shape))
            found[name] = values > 0 if dtype == torch.bool else values.to(dtype)
    return found


def test_whole_tensors_and_slices_are_the_librarys(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(tensor_reads, "BLOCK_BYTES", 64)  # several blocks per tensor
    path = tmp_path / "t.safetensors"
    save_file(tensors(), path, metadata={"format": "pt"})
    with TensorFile(path) as ours, safe_open(path, framework="pt") as theirs:
        assert sorted(ours.names()) == sorted(theirs.keys())
        for name in theirs.keys():
            reference = theirs.get_tensor(name)
            whole = ours.read(name)
            assert whole.dtype == reference.dtype and torch.equal(whole, reference)
            assert ours.shape(name) == tuple(reference.shape)
            for dim in range(reference.dim()):
                size = reference.shape[dim]
                ranges = ((1, size // 2), (size // 2 + 1, size)) if size > 3 else ((0, size),)
                lead = (slice(None),) * dim
                expected = torch.cat([reference[(*lead, slice(a, b))] for a, b in ranges],
                                     dim=dim)
                assert torch.equal(ours.read(name, dim, ranges), expected), (name, dim)


def test_a_truncated_or_foreign_file_is_a_checkpoint_error(tmp_path: Path):
    path = tmp_path / "t.safetensors"
    save_file({"w": torch.ones(64, 64)}, path)
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    with TensorFile(path) as f, pytest.raises(CheckpointError, match="ends inside a tensor"):
        f.read("w")
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a safetensors file"):
        TensorFile(path)
