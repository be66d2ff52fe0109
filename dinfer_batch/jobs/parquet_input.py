"""A Parquet file as an input: its rows as JSON objects, a batch at a time, read row group
by row group (pyarrow's `iter_batches`), so that memory is bounded by a row group and a
batch however large the file; what each row's columns mean is formats/columns.py's.
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
from dinfer_batch.formats.columns import Columns

MAGIC = b"PAR1"


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


def row_texts(path: Path, batch_rows: int) -> Iterator[list[str]]:
    """Each batch of up to `batch_rows` rows as JSON object texts, in file order."""
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
        for batch in table.iter_batches(batch_size=batch_rows):
            yield [orjson.dumps(row, default=_plain).decode() for row in batch.to_pylist()]
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is not a readable Parquet file: {exc}") from exc


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
