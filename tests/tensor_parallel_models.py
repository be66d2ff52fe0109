"""Tiny checkpoints of the three families whose dimensions divide by 2 and 4 ranks
(vocabulary 48 rows; 4 query heads over 2 key/value heads: GQA, and at 4 ranks the
key/value heads are replicated), for the tensor-parallel tests."""

from __future__ import annotations

from pathlib import Path

from tests.tiny_model import write_tiny_checkpoint
from tests.tiny_moe import write_tiny_moe

VOCAB = 48


def write_family(directory: Path, family: str) -> Path:
    """family: "llada" (sharded safetensors with an index), "llada_moe" (one tensor per
    expert) or "llada2" (fused experts, a shared expert)."""
    if family == "llada":
        return write_tiny_checkpoint(directory, embedding_size=VOCAB)
    return write_tiny_moe(directory, family, fused=family == "llada2", vocab_size=VOCAB)


def replicated(name: str) -> bool:
    """Parameters every rank holds whole: norms, the router and its expert bias."""
    return any(part in name for part in ("norm", "ln_f", ".gate.weight", "expert_bias"))
