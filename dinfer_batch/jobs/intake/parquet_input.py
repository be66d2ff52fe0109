"""A Parquet file as an input: its rows as JSON objects, a batch at a time, read row group
by row group (pyarrow's `iter_batches`), so that memory is bounded by a row group and a
batch however large the file; what each row's columns mean is formats/lines/columns.py's.
A file is Parquet when it is named `.parquet` or starts with Parquet's magic bytes (an
upload through the API has no name of its own)."""

from __future__ import annotations

import base64
import decimal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from dinfer_batch.errors import UserError
from dinfer_batch.formats.limits import MAX_LINE_CHARS
from dinfer_batch.formats.lines.columns import Columns
from dinfer_batch.formats.lines.requests import Refused

MAGIC = b"PAR1"
BATCH_BYTES = 16 << 20  # decoded bytes of the rows made into Python objects at once


def is_parquet(path: Path) -> bool:
    if path.suffix.lower() == ".parquet":
        return True
    try:
        with path.open("rb") as handle:
            return handle.read(4) == MAGIC
    except OSError:
        return False


def column_names(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(path).names)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise UserError(f"{path} is not a readable Parquet file: {exc}") from exc


def default_columns(path: Path) -> Columns:
    """The `prompt` or `messages` column of a Parquet file given no column option."""
    return Columns.detect(column_names(path))


def row_count(path: Path) -> int:
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path).metadata.num_rows
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is not a readable Parquet file: {exc}") from exc


def row_texts(path: Path, batch_rows: int, batch_bytes: int = BATCH_BYTES,
              total_bytes: int | None = None) -> Iterator[list[str]]:
    """Each batch of up to `batch_rows` rows and about `batch_bytes` decoded bytes as JSON
    object texts, in file order. A row whose values decode to more than the line limit is
    a `Refused` text naming its largest column, never made into Python objects. With
    `total_bytes`, UserError once the rows decode to more than that (an upload's limit:
    a few KB of Parquet cost no more to read than the same rows sent as JSONL may).

    What a batch costs is known before it is decoded: string columns are read as Arrow
    dictionaries (a dictionary-encoded column stays its dictionary and indices, however
    many rows repeat a long value), each row's decoded size is summed from Arrow's
    buffers (`_decoded_bytes`), and rows become Python objects only a slice of at most
    `batch_bytes` at a time. A row group is read `_group_rows` rows at a time, from its
    uncompressed size in the file's metadata, so that a plain-encoded column's batch is
    about `batch_bytes` as well."""
    import pyarrow.parquet as pq

    try:
        leaves = [column.path for column in pq.ParquetFile(path).schema
                  if column.physical_type == "BYTE_ARRAY"]
        table = pq.ParquetFile(path, read_dictionary=leaves)
        decoded = 0
        for group in range(table.num_row_groups):
            rows = _group_rows(table.metadata.row_group(group), batch_rows, batch_bytes)
            for batch in table.iter_batches(batch_size=rows, row_groups=[group]):
                for texts in _slices(batch, batch_bytes):
                    decoded += sum(map(len, texts))
                    if total_bytes is not None and decoded > total_bytes:
                        raise UserError(
                            f"the Parquet file's rows decode to more than {total_bytes:,} "
                            "characters, the upload limit (DINFER_BATCH_MAX_FILE_BYTES) "
                            "that the same rows sent as JSONL would have; split it")
                    yield texts
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is not a readable Parquet file: {exc}") from exc


def _group_rows(group: Any, batch_rows: int, batch_bytes: int) -> int:
    """Rows of a row group to read at once: about `batch_bytes` of its uncompressed pages."""
    size = max(1, group.total_byte_size)
    return max(1, min(batch_rows, batch_bytes * group.num_rows // size))


def _slices(batch: Any, batch_bytes: int) -> Iterator[list[str]]:
    """A record batch's rows as JSON texts, in slices of at most `batch_bytes` decoded
    bytes (or one row)."""
    import numpy as np

    columns = [_decoded_bytes(column) for column in batch.columns]
    sizes = (np.sum(columns, axis=0) if columns else np.zeros(batch.num_rows)).tolist()
    start, held = 0, 0.0
    for row, size in enumerate(sizes):
        cost = 0.0 if size > MAX_LINE_CHARS else size
        if held + cost > batch_bytes and row > start:
            yield _slice_texts(batch, columns, sizes, start, row)
            start, held = row, 0.0
        held += cost
    if batch.num_rows > start:
        yield _slice_texts(batch, columns, sizes, start, batch.num_rows)


def _slice_texts(batch: Any, columns: list[Any], sizes: list[float], start: int,
                 stop: int) -> list[str]:
    texts: list[str] = []
    run = start  # the first row not made into a text yet
    for row in range(start, stop + 1):
        if row < stop and sizes[row] <= MAX_LINE_CHARS:
            continue
        texts += [orjson.dumps(values, default=_plain).decode()
                  for values in batch.slice(run, row - run).to_pylist()]
        if row < stop:
            largest = max(range(len(columns)), key=lambda column: columns[column][row])
            texts.append(Refused(
                f"column {batch.schema.names[largest]!r} decodes to about "
                f"{int(columns[largest][row]):,} characters, the row to {int(sizes[row]):,}; "
                f"a row is at most {MAX_LINE_CHARS:,} characters (the line limit)"))
        run = row + 1
    return texts


def _decoded_bytes(array: Any) -> Any:
    """About the JSON text length of each value of an Arrow array, as a numpy array,
    computed from its buffers (string lengths, list offsets), making no Python object."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    if pa.types.is_dictionary(kind):
        values = _decoded_bytes(array.dictionary)
        indices = array.indices.fill_null(0).to_numpy(zero_copy_only=False)
        return values[indices] if len(values) else np.zeros(len(array))
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or \
            pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        # bytes come out as base64 at worst (_plain): 4/3 of their length
        lengths = pc.binary_length(array).fill_null(0).to_numpy(zero_copy_only=False)
        return lengths * (4 / 3 if pa.types.is_binary(kind) or
                          pa.types.is_large_binary(kind) else 1) + 2
    if pa.types.is_fixed_size_binary(kind):
        return np.full(len(array), kind.byte_width * 4 / 3 + 2)
    if isinstance(array, pa.FixedSizeListArray):
        children = _decoded_bytes(array.flatten())
        parents = pc.list_parent_indices(array).to_numpy(zero_copy_only=False)
        return np.bincount(parents, weights=children, minlength=len(array)) + 2
    if isinstance(array, (pa.ListArray, pa.LargeListArray)):  # maps too
        offsets = array.offsets.to_numpy(zero_copy_only=False)
        children = _decoded_bytes(array.values.slice(offsets[0], offsets[-1] - offsets[0]))
        parents = np.repeat(np.arange(len(array)), np.diff(offsets))
        return np.bincount(parents, weights=children, minlength=len(array)) + 2
    if pa.types.is_struct(kind):
        total = np.full(len(array), 2.0)
        for index, child in enumerate(array.flatten()):
            total += _decoded_bytes(child) + len(kind.field(index).name) + 4
        return total
    return np.full(len(array), 32.0)  # a number, a date, a boolean: a few characters


def _plain(value: Any) -> Any:
    """JSON for what orjson does not know: decimals as strings, bytes as UTF-8 text (else
    base64)."""
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(value).decode()
    return str(value)
