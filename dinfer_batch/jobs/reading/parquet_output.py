"""A job's results as a Parquet file, one row per request (or per sample), in input
order, for dataset pipelines (`datasets.load_dataset("parquet", ...)`, pandas, Ray Data):
the same lines as the JSONL results (formats/results/output.py), flattened into fixed columns and
written a page of rows per row group, so memory stays bounded by a page."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.jobs.reading.results import outputs
from dinfer_batch.storage.tables import Job

ROWS_PER_GROUP = 5000
NOT_RUN = {"batch_cancelled": "cancelled", "pending": "pending"}  # error code -> status
COLUMNS = ("custom_id", "status", "text", "texts", "finish_reason", "prompt_tokens",
           "completion_tokens", "total_tokens", "error_code", "error_message", "metadata")


def schema() -> Any:
    import pyarrow as pa

    text, number = pa.string(), pa.int64()
    return pa.schema([("custom_id", text), ("status", text), ("text", text),
                      ("texts", pa.list_(text)), ("finish_reason", text),
                      ("prompt_tokens", number), ("completion_tokens", number),
                      ("total_tokens", number), ("error_code", text), ("error_message", text),
                      ("metadata", text)])


def write_parquet(sessions: sessionmaker[Session], job: Job, path: Path | IO[bytes],
                  per_sample: bool = False) -> int:
    """Write the job's rows to `path` (or an open binary file); returns how many."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    written, rows = 0, []
    with pq.ParquetWriter(path, schema()) as writer:
        for line in outputs(sessions, job, per_sample):
            rows.append(row(line))
            if len(rows) >= ROWS_PER_GROUP:
                writer.write_table(pa.Table.from_pylist(rows, schema()))
                written, rows = written + len(rows), []
        if rows or not written:
            writer.write_table(pa.Table.from_pylist(rows, schema()))
    return written + len(rows)


def row(line: dict[str, Any]) -> dict[str, Any]:
    """One output line (a BatchRequestOutput) as a row of COLUMNS: its text(s) and usage
    whichever endpoint's body it holds; the table's other columns (metadata) as JSON."""
    metadata = line.get("metadata")
    base = {"custom_id": line["custom_id"], "text": None, "texts": None,
            "finish_reason": None, "prompt_tokens": None, "completion_tokens": None,
            "total_tokens": None, "error_code": None, "error_message": None,
            "metadata": None if metadata is None else json.dumps(metadata,
                                                                 ensure_ascii=False)}
    if line["error"] is not None:
        status = NOT_RUN.get(line["error"]["code"], "failed")
        return base | {"status": status, "error_code": line["error"]["code"],
                       "error_message": line["error"]["message"]}
    body = line["response"]["body"]
    texts, reasons = _texts(body)
    usage = body["usage"]
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens"))
    return base | {"status": "completed", "text": texts[0] if texts else None,
                   "texts": texts, "finish_reason": reasons[0] if reasons else None,
                   "prompt_tokens": prompt, "completion_tokens": completion,
                   "total_tokens": usage["total_tokens"]}


def _texts(body: dict[str, Any]) -> tuple[list[str], list[str]]:
    if body["object"] == "response":  # one message per sample; incomplete: out of tokens
        return ([item["content"][0]["text"] for item in body["output"]],
                ["length" if item["status"] == "incomplete" else "stop"
                 for item in body["output"]])
    choices: Iterable[dict[str, Any]] = body["choices"]
    texts = [c["message"]["content"] if "message" in c else c["text"] for c in choices]
    return texts, [c["finish_reason"] for c in body["choices"]]
