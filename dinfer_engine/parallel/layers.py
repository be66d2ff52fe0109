"""Megatron-style sharding of a family's model, built on the meta device before any
weight is read: which slice of every parameter a rank holds, and the few layers that
communicate.

- column-parallel (q/k/v, gate/up): a linear of the same class (nn.Linear, or a
  GridLinear on DiffusionGemma's fixed grid) with this rank's output rows;
  attention modules then hold their local head counts (`n_heads`, `n_kv_heads`);
- row-parallel (attention output, down): this rank's input columns, the partial
  products (on the fixed grid when the replaced linear was) summed across ranks before
  the (replicated) bias;
- embedding and LM head split by vocabulary rows (the head's logits stay split:
  dinfer_engine/parallel/vocab.py reduces what the decoders need from them);
- experts split across ranks (expert parallel), the router replicated, each rank adding
  only its experts' outputs before one sum across ranks; shared experts are GatedMLPs,
  tensor-parallel like any MLP. SparseMoE becomes ExpertParallelMoE; a family's own
  experts module names its per-expert parameters in `expert_parallel` and is handed its
  first expert and the sum (`first`, `reduce`: DiffusionGemma's Experts).

A module says how its children split with a `tensor_parallel` dict (child name ->
kind); everything else (norms, router, QK-norms) is replicated. A dimension that does
not divide by the number of ranks is an error naming it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol, cast

import torch
import torch.nn.functional as F
from torch import nn

from dinfer_engine.models import fixed_grid
from dinfer_engine.models.base import DiffusionLM
from dinfer_engine.models.moe import SparseMoE, grouped_experts
from dinfer_engine.parallel.group import Group

Range = tuple[int, int]


@dataclass(frozen=True)
class Shard:
    """The part of a full parameter this rank holds: the `ranges` [start, stop) along
    `dim`, concatenated."""

    dim: int
    ranges: tuple[Range, ...]

    def local_index(self, index: tuple) -> tuple | None:
        """A checkpoint tensor's index into the full parameter (its first element an
        expert number along dim 0) as an index into this rank's part; None when another
        rank holds it."""
        (start, stop), = self.ranges
        if self.dim != 0 or not isinstance(index[0], int):
            raise ValueError(f"cannot shard index {index!r} along dim {self.dim}")
        return (index[0] - start, *index[1:]) if start <= index[0] < stop else None


Product = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # x, weight -> x @ weight.T


class RowParallelLinear(nn.Linear):
    """y = sum over ranks of x_r W_r^T, then the bias: the input features are split;
    `product` computes x_r W_r^T (the replaced linear's: fixed_grid.linear for a
    GridLinear)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, group: Group,
                 product: Product = F.linear) -> None:
        super().__init__(in_features, out_features, bias=bias)
        self.group, self.product = group, product

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.group.all_reduce(self.product(x, self.weight))
        return y if self.bias is None else y + self.bias


class VocabParallelEmbedding(nn.Embedding):
    """This rank's rows [first, first + count) of the table; other ids embed to zero here
    and the sum across ranks is every id's row, exactly."""

    def __init__(self, first: int, count: int, dim: int, group: Group) -> None:
        super().__init__(count, dim)
        self.first, self.group = first, group

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.first
        inside = (local >= 0) & (local < self.num_embeddings)
        out = F.embedding(torch.where(inside, local, 0), self.weight)
        return self.group.all_reduce(out.masked_fill(~inside[..., None], 0))


class ExpertParallelMoE(SparseMoE):
    """SparseMoE holding experts [first, first + count): the replicated router picks
    experts for every token, this rank computes the assignments to its own experts
    (the others are skipped, id -1), and the partial outputs are summed across ranks."""

    def __init__(self, moe: SparseMoE, group: Group) -> None:
        super().__init__(moe.cfg)
        cfg = moe.cfg
        self.first, self.count = group.split(cfg.num_experts, "num_experts")
        self.group = group
        i, h = cfg.expert_intermediate_size, cfg.hidden_size
        self.w13 = nn.Parameter(torch.empty(self.count, 2 * i, h))
        self.w2 = nn.Parameter(torch.empty(self.count, h, i))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        ids, weights = self.gate(flat, self.cfg)
        local = ids - self.first
        mine = (local >= 0) & (local < self.count)
        out = grouped_experts(flat, self.w13, self.w2, torch.where(mine, local, -1),
                              weights.masked_fill(~mine, 0)).view_as(x)
        out = self.group.all_reduce(out)
        if self.shared_experts is not None:  # tensor-parallel: sums its own partials
            out = out + self.shared_experts(x)
        return out


def shard_model(model: DiffusionLM, group: Group) -> dict[str, Shard]:
    """Replace `model`'s layers (on the meta device) by this rank's parts; returns each
    sharded parameter's Shard (parameters not listed are replicated)."""
    shards: dict[str, Shard] = {}
    for path, module in list(model.named_modules()):
        if isinstance(module, SparseMoE):
            moe = ExpertParallelMoE(module, group)
            _replace(model, path, moe)
            experts = Shard(0, ((moe.first, moe.first + moe.count),))
            shards[f"{path}.w13"] = shards[f"{path}.w2"] = experts
        elif hasattr(module, "expert_parallel"):
            shards.update(_split_experts(module, path, group))
    for path, module in list(model.named_modules()):
        kinds = getattr(module, "tensor_parallel", {})
        heads = HeadSplit.of(module, group) if hasattr(module, "n_heads") else None
        for child, kind in kinds.items():
            shards.update(_shard_linear(model, f"{path}.{child}" if path else child, kind,
                                        heads, group))
        if heads is not None:
            module.n_heads, module.n_kv_heads = heads.local_heads, heads.local_kv_heads
    head = next((p for p, m in model.named_modules()
                 if isinstance(m, nn.Linear) and m.weight is model.head_weight()), None)
    embedding_path = next(p for p, m in model.named_modules() if m is model.embedding())
    vocab, dim = model.embedding().weight.shape
    first, count = group.split(vocab, "vocabulary size")
    vocab_rows = Shard(0, ((first, first + count),))
    _replace(model, embedding_path, VocabParallelEmbedding(first, count, dim, group))
    shards[f"{embedding_path}.weight"] = vocab_rows
    if head is not None:
        _replace(model, head, nn.Linear(dim, count, bias=False))
        shards[f"{head}.weight"] = vocab_rows
    return shards


@dataclass(frozen=True)
class HeadSplit:
    """An attention module's query and key/value heads on this rank, as row ranges of
    its projections. Key/value heads split like the query heads; when there are fewer
    of them than ranks, each rank holds the one its query heads share (replicated)."""

    q: Range
    kv: Range
    heads: int  # the model's, all ranks together
    kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, module: nn.Module, group: Group) -> HeadSplit:
        h, kv, d = (int(getattr(module, name)) for name in ("n_heads", "n_kv_heads",
                                                             "head_dim"))
        first, count = group.split(h, "attention heads")
        if kv >= group.size:
            kv_first, kv_count = group.split(kv, "key/value heads")
        elif group.size % kv:
            raise ValueError(f"key/value heads={kv} are fewer than tensor_parallel="
                             f"{group.size} ranks and do not divide it")
        else:
            kv_first, kv_count = group.rank // (group.size // kv), 1
        return cls((first * d, (first + count) * d), (kv_first * d, (kv_first + kv_count) * d),
                   h, kv, d)

    @property
    def local_heads(self) -> int:
        return (self.q[1] - self.q[0]) // self.head_dim

    @property
    def local_kv_heads(self) -> int:
        return (self.kv[1] - self.kv[0]) // self.head_dim

    def ranges(self, kind: str) -> tuple[Range, ...]:
        if kind in ("heads", "heads_in"):
            return (self.q,)
        if kind == "kv_heads":
            return (self.kv,)
        k_start = self.heads * self.head_dim
        v_start = k_start + self.kv_heads * self.head_dim
        return self.q, _shift(self.kv, k_start), _shift(self.kv, v_start)


def _shard_linear(model: nn.Module, path: str, kind: str, heads: HeadSplit | None,
                  group: Group) -> dict[str, Shard]:
    """Replace the nn.Linear at `path` by its part of `kind`: "column" / "row" (an even
    split of the output / input features), "heads" / "kv_heads" / "qkv_heads" (output
    rows by query heads, key/value heads, or both of a fused [q | k | v] projection) or
    "heads_in" (input columns by query heads)."""
    linear = model.get_submodule(path)
    assert isinstance(linear, nn.Linear)
    bias = linear.bias is not None
    if kind in ("column", "row"):
        features = linear.out_features if kind == "column" else linear.in_features
        first, count = group.split(features, f"{path} {kind} features")
        ranges: tuple[Range, ...] = ((first, first + count),)
    else:
        assert heads is not None, f"{path}: {kind} needs an attention module"
        ranges = heads.ranges(kind)
    count = sum(stop - start for start, stop in ranges)
    # a linear on the fixed grid (dinfer_engine/models/fixed_grid.py) keeps its products there
    grid = isinstance(linear, fixed_grid.GridLinear)
    if kind in ("row", "heads_in"):
        _replace(model, path, RowParallelLinear(count, linear.out_features, bias, group,
                                                fixed_grid.linear if grid else F.linear))
        return {f"{path}.weight": Shard(1, ranges)}
    _replace(model, path, type(linear)(linear.in_features, count, bias=bias))
    shards = {f"{path}.weight": Shard(0, ranges)}
    if bias:
        shards[f"{path}.bias"] = Shard(0, ranges)
    return shards


class SplitsExperts(Protocol):
    """A family's own experts module (DiffusionGemma's Experts): the parameters holding
    one expert per row of dim 0, its first expert's number, and the sum across ranks."""

    expert_parallel: ClassVar[tuple[str, ...]]
    first: int
    reduce: Callable[[torch.Tensor], torch.Tensor] | None


def _split_experts(module: nn.Module, path: str, group: Group) -> dict[str, Shard]:
    """Keep this rank's even share of the module's experts; it then adds its experts'
    outputs and `reduce`s them."""
    experts = cast(SplitsExperts, module)
    names = experts.expert_parallel
    first, count = group.split(getattr(module, names[0]).shape[0], "num_experts")
    for name in names:
        shape = getattr(module, name).shape
        setattr(module, name, nn.Parameter(torch.empty(count, *shape[1:])))
    experts.first, experts.reduce = first, group.all_reduce
    shard = Shard(0, ((first, first + count),))
    return {f"{path}.{name}": shard for name in names}


def _shift(span: Range, offset: int) -> Range:
    return span[0] + offset, span[1] + offset


def _replace(model: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent), name, module)
