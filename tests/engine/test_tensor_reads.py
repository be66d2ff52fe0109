"""dinfer_engine/loading/tensor_reads.py against the safetensors library's own reader: whole
tensors and slices along every dimension, in every dtype a checkpoint holds, from a file
the library wrote; a rank's peak memory holds no mapped file pages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from dinfer_engine.loading import tensor_reads
from dinfer_engine.loading.tensor_reads import TensorFile
from dinfer_engine.models.config import CheckpointError
from tests.tiny_model import write_tiny_checkpoint

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
        for name in theirs.keys():  # noqa: SIM118 - a safe_open is no dict
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


GROWTH = """
import json, resource, sys, torch
from pathlib import Path
from dinfer_engine.loading.checkpoint import load_model
from dinfer_engine.parallel.group import Group

group = None if sys.argv[3] == "1" else Group(0, int(sys.argv[3]))
load_model(Path(sys.argv[2]), torch.device("cpu"), torch.float32, group)  # code paths paged in
before = int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
model = load_model(Path(sys.argv[1]), torch.device("cpu"), torch.float32, group)
for parameter in model.parameters():  # as a generate reads them
    parameter.sum()
# this process's own peak: ru_maxrss would start from the parent's size at the fork
peak = next(int(line.split()[1]) for line in open("/proc/self/status")
            if line.startswith("VmHWM:")) * 1024
grown = peak - before
print(json.dumps([grown, sum(p.nbytes for p in model.parameters())]))
"""


def grown(path: Path, tiny: Path, ranks: int) -> tuple[int, int]:
    """(peak RSS growth from loading the weights to having read each of them, parameter
    bytes kept), in a fresh process."""
    out = subprocess.run([sys.executable, "-c", GROWTH, str(path), str(tiny), str(ranks)],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    growth, kept = json.loads(out)
    return growth, kept


def test_loading_holds_each_weight_once_and_a_rank_only_its_share(tmp_path: Path):
    """One rank grows by about the weights' bytes; a rank of two by about its half, though
    half of its reads are input columns of row-parallel weights (a mapped read of those
    touched every page of the whole tensor, and kept the pages of every tensor it read
    until the file closed: the rank grew by more than one rank did)."""
    tiny = write_tiny_checkpoint(tmp_path / "tiny", max_shard_bytes=None, embedding_size=64)
    path = write_tiny_checkpoint(tmp_path / "llada", max_shard_bytes=None, d_model=512,
                                 n_heads=8, n_kv_heads=8, mlp_hidden_size=2048, n_layers=4,
                                 embedding_size=64)
    one, weights = grown(path, tiny, 1)
    assert weights > 60e6 and one < 1.3 * weights, (one, weights)
    rank, kept = grown(path, tiny, 2)
    assert kept < 0.55 * weights and rank < 0.65 * one, (rank, one)
