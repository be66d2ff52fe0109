"""The ranks of one tensor-parallel model and the collectives its layers use.

Every rank of a replica runs in its own process and joins torch.distributed's default
group (NCCL on CUDA, gloo on CPU) through a TCP store that rank 0 opens. Collectives
have a timeout, so a rank left waiting on a peer that died or hangs raises instead of
blocking for ever; gloo also raises as soon as a peer's connection closes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Group:
    """This process's place among `size` ranks."""

    rank: int
    size: int

    def split(self, total: int, what: str) -> tuple[int, int]:
        """(first, count) of this rank's even share of `total` items; ValueError naming
        `what` when they do not divide."""
        if total % self.size:
            raise ValueError(f"{what}={total} does not divide by tensor_parallel={self.size}")
        count = total // self.size
        return self.rank * count, count

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """In place; returns `tensor`."""
        ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}
        dist.all_reduce(tensor, op=ops[op])
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """[size, *tensor.shape]: every rank's tensor, in rank order."""
        parts = [torch.empty_like(tensor) for _ in range(self.size)]
        dist.all_gather(parts, tensor.contiguous())
        return torch.stack(parts)


def join(rank: int, size: int, host: str, port: int, device: torch.device,
         timeout_s: float = DEFAULT_TIMEOUT_S, store: dist.TCPStore | None = None) -> Group:
    """Join the default process group as `rank` of `size`; rank 0 passes the store it
    opened (TCPStore(host, 0, is_master=True) picks a free port)."""
    if dist.is_initialized():
        raise RuntimeError("this process already runs a tensor-parallel engine; close it "
                           "first (one per process)")
    timeout = timedelta(seconds=timeout_s)
    if store is None:
        store = dist.TCPStore(host, port, size, is_master=False, timeout=timeout)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, store=store, rank=rank, world_size=size,
                            timeout=timeout)
    return Group(rank, size)


def leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
