"""Read tensors, or a tensor-parallel rank's slices of them, from a safetensors file with
positioned reads (pread) into tensors of our own, not through a memory map.

A memory-mapped read leaves every page it touched resident in the process, counted in
its memory until the file is closed: a one-rank load held the weights twice at its peak
(the mapped file and the copy), and a rank reading the input columns of a row-parallel
weight touched every page of the whole tensor (a row's slice is smaller than a page), so
a rank held nearly the whole model (figures: docs/adr/028-prefix-cache.md). Read here, the file's
pages stay in the kernel's page cache, shared and reclaimable, and a process holds only
what it keeps: a slice along the first dimension is one read straight into its tensor; a
slice along a later one reads whole rows a bounded block at a time and keeps their
columns (docs/adr/028-prefix-cache.md).

The format: 8 bytes (little-endian length N), N bytes of JSON naming each tensor's dtype,
shape and [begin, end) byte offsets after the header, then the data, row-major."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from dinfer_engine.models.config import CheckpointError

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
          "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
          "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
          "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}
BLOCK_BYTES = 32 << 20  # whole rows read at once for a slice along a later dimension
Range = tuple[int, int]


class TensorFile:
    """`with TensorFile(path) as f:` its `names()`, each tensor's `shape(name)`, and
    `read(name, dim, ranges)`: the tensor, or its `ranges` along `dim` concatenated."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)
        try:
            length = int.from_bytes(self._read_bytes(0, 8), "little")
            if length > os.fstat(self.fd).st_size - 8:
                raise ValueError(f"a header of {length} bytes is longer than the file")
            header = json.loads(self._read_bytes(8, length))
        except (ValueError, EOFError) as exc:
            os.close(self.fd)
            raise CheckpointError(f"{path.name}: not a safetensors file ({exc})") from exc
        header.pop("__metadata__", None)
        self.start = 8 + length
        self.entries: dict[str, dict[str, Any]] = header

    def __enter__(self) -> TensorFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        os.close(self.fd)

    def names(self) -> list[str]:
        return list(self.entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.entries[name]["shape"])

    def read(self, name: str, dim: int = 0, ranges: tuple[Range, ...] | None = None
             ) -> torch.Tensor:
        entry = self.entries[name]
        if entry["dtype"] not in DTYPES:
            raise CheckpointError(f"{self.path.name}: tensor {name} has dtype "
                                  f"{entry['dtype']}, which the engine does not read")
        dtype, shape = DTYPES[entry["dtype"]], self.shape(name)
        offset = self.start + entry["data_offsets"][0]
        if ranges is None:
            return self._into(torch.empty(shape, dtype=dtype), offset)
        outer, inner = math.prod(shape[:dim]), math.prod(shape[dim + 1:])
        size = dtype.itemsize
        parts = []
        for begin, stop in ranges:
            part_shape = (*shape[:dim], stop - begin, *shape[dim + 1:])
            if outer == 1:  # one contiguous run of bytes
                parts.append(self._into(torch.empty(part_shape, dtype=dtype),
                                        offset + begin * inner * size))
            else:
                parts.append(self._columns(offset, dtype, (outer, shape[dim], inner),
                                           (begin, stop)).view(part_shape))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=dim)

    def _columns(self, offset: int, dtype: torch.dtype, dims: tuple[int, int, int],
                 columns: Range) -> torch.Tensor:
        """Of a tensor seen as [outer, middle, inner], [:, begin:stop, :], reading whole
        rows (a middle x inner run each) a bounded block at a time."""
        outer, middle, inner = dims
        begin, stop = columns
        out = torch.empty((outer, stop - begin, inner), dtype=dtype)
        row_bytes = middle * inner * dtype.itemsize
        per_block = max(1, BLOCK_BYTES // max(row_bytes, 1))
        for first in range(0, outer, per_block):
            rows = min(per_block, outer - first)
            block = self._into(torch.empty((rows, middle, inner), dtype=dtype),
                               offset + first * row_bytes)
            out[first:first + rows] = block[:, begin:stop]
        return out

    def _into(self, tensor: torch.Tensor, offset: int) -> torch.Tensor:
        """Fill `tensor` (new, contiguous, on the CPU) with the bytes at `offset`."""
        view = tensor.reshape(-1).view(torch.uint8).numpy().data if tensor.numel() \
            else memoryview(b"")
        done = 0
        while done < len(view):
            got = os.preadv(self.fd, [view[done:]], offset + done)
            if got == 0:
                raise CheckpointError(f"{self.path.name}: file ends inside a tensor")
            done += got
        return tensor

    def _read_bytes(self, offset: int, count: int) -> bytes:
        data = os.pread(self.fd, count, offset)
        if len(data) != count:
            raise EOFError(f"{count} bytes expected at {offset}, {len(data)} found")
        return data
