"""Parquet in and out: a table of prompts (or chat messages) runs with its other columns
kept as metadata, bad rows failing alone; the results come back as a Parquet file of one
row per request that `datasets` and pandas load."""

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tqdm
from datasets import load_dataset

from tests.service_helpers import read_jsonl, write_jsonl

# datasets' progress bars start tqdm's monitor thread, which would stay in this test
# process and keep later tests' ingest from forking (dinfer_batch.parallel.forkable)
tqdm.tqdm.monitor_interval = 0

SMALL = ("--max-tokens", "4", "--block-length", "2")


def test_a_parquet_table_round_trips_through_datasets(sqlite_service, tmp_path):
    table = pa.table({
        "id": [10, 11, 12, 13, 14],
        "question": ["add 1 1=", "add 2 2=", "", "add 4 4=", "add 5 5="],
        "source": ["a", "b", "c", None, "e"],
        "score": [0.5, 1.5, 2.5, 3.5, 4.5],
        "max_tokens": [None, 2, None, None, None],
    })
    source = tmp_path / "in.parquet"
    pq.write_table(table, source, row_group_size=2)  # three row groups
    out = tmp_path / "out.parquet"
    done = sqlite_service.cli("run", source, "--prompt-column", "question", "--id-column", "id",
                              "--format", "parquet", "-o", out, *SMALL)
    assert done.exit_code == 0, done.output  # one row failed: the job still completes
    assert out.exists() and not list(tmp_path.glob(".out.parquet*"))

    rows = load_dataset("parquet", data_files=str(out), split="train")
    assert rows["custom_id"] == ["10", "11", "12", "13", "14"]
    assert rows["status"] == ["completed", "completed", "failed", "completed", "completed"]
    failed = rows[2]
    assert failed["error_message"] == "line 3: prompt must be a non-empty string, got ''"
    assert failed["text"] is None and failed["metadata"] is None
    for row in (rows[0], rows[1], rows[3], rows[4]):
        assert isinstance(row["text"], str) and row["texts"] == [row["text"]]
        assert row["finish_reason"] in ("stop", "length")
        assert row["total_tokens"] == row["prompt_tokens"] + row["completion_tokens"]
    assert rows[1]["completion_tokens"] <= 2  # the row's max_tokens column applied
    assert json.loads(rows[0]["metadata"]) == {"source": "a", "score": 0.5}
    assert json.loads(rows[3]["metadata"]) == {"score": 3.5}

    frame = pd.read_parquet(out)
    assert list(frame["custom_id"]) == rows["custom_id"]
    assert list(frame.columns) == ["custom_id", "status", "text", "texts", "finish_reason",
                                   "prompt_tokens", "completion_tokens", "total_tokens",
                                   "error_code", "error_message", "metadata"]

    # the same job as JSONL: the metadata rides on each line
    job_id = sqlite_service.cli("list", "--json").output.splitlines()[0]
    job_id = json.loads(job_id)["id"]
    lines_file = tmp_path / "out.jsonl"
    assert sqlite_service.cli("results", job_id, "-o", lines_file).exit_code == 0
    lines = read_jsonl(lines_file)
    assert [x["custom_id"] for x in lines] == rows["custom_id"]
    assert lines[4]["metadata"] == {"source": "e", "score": 4.5}
    assert lines[4]["response"]["body"]["choices"][0]["text"] == rows[4]["text"]


def test_messages_columns_and_the_default_column(sqlite_service, tmp_path):
    chats = pa.table({"messages": [[{"role": "user", "content": "hi"}],
                                   [{"role": "user", "content": "yo"}]],
                      "topic": ["x", "y"]})
    pq.write_table(chats, tmp_path / "chats.parquet")
    out = tmp_path / "chats.jsonl"
    done = sqlite_service.cli("run", tmp_path / "chats.parquet", "-o", out, *SMALL)
    assert done.exit_code == 0, done.output
    lines = read_jsonl(out)
    assert [x["custom_id"] for x in lines] == ["line-1", "line-2"]
    assert lines[0]["response"]["body"]["object"] == "chat.completion"
    assert lines[1]["metadata"] == {"topic": "y"}

    # a JSONL table with a column option: the same mapping
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"q": "add 1 1=", "tag": 1}, {"q": None}])
    done = sqlite_service.cli("run", rows, "--prompt-column", "q", "-o", out, *SMALL)
    lines = read_jsonl(out)
    assert lines[0]["metadata"] == {"tag": 1} and lines[0]["error"] is None
    assert lines[1]["error"]["message"] == "line 2: the 'q' column is empty"


@pytest.mark.parametrize(("args", "message"), [
    ((), "neither a 'prompt' and a 'messages' column"),
    (("--prompt-column", "nope"), "the table has no column 'nope'"),
    (("--prompt-column", "a", "--messages-column", "b"), "not both"),
])
def test_a_table_without_the_column_is_refused_up_front(sqlite_service, tmp_path, args,
                                                         message):
    pq.write_table(pa.table({"text": ["x"]}), tmp_path / "t.parquet")
    done = sqlite_service.cli("submit", tmp_path / "t.parquet", *args)
    assert done.exit_code == 2 and message in done.output, done.output
    assert sqlite_service.cli("list", "--json").output == ""


def test_not_a_parquet_file(sqlite_service, tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 this is not parquet")
    done = sqlite_service.cli("submit", tmp_path / "bad.parquet")
    assert done.exit_code == 2 and "is not a readable Parquet file" in done.output


def test_a_parquet_file_without_its_name_is_read_as_parquet(sqlite_service, tmp_path):
    """An upload through the API is stored without its name: Parquet's magic bytes say."""
    pq.write_table(pa.table({"prompt": ["a", "b", "c"]}), tmp_path / "upload")
    done = sqlite_service.cli("submit", tmp_path / "upload", "--json")
    assert done.exit_code == 0, done.output
    job = json.loads(done.output[done.output.index("{"):])
    assert job["request_counts"] == {"total": 3, "completed": 0, "failed": 0}


def test_rows_are_decoded_a_byte_budget_at_a_time(tmp_path):
    from dinfer_batch.formats.lines.requests import Refused
    from dinfer_batch.jobs.intake.parquet_input import row_texts

    rows = 200
    long = "q" * 50_000  # dictionary-encoded: one value for every row
    table = pa.table({
        "prompt": [long] * rows,
        "plain": [f"{i}".ljust(20_000, "p") for i in range(rows)],
        "tags": pa.array([{"k": "v" * i} for i in range(rows)],
                         pa.map_(pa.string(), pa.string())),
        "pair": pa.array([[i, i] for i in range(rows)], pa.list_(pa.int64(), 2)),
        "blob": pa.array([b"b" * (5 << 20) if i == 150 else None for i in range(rows)],
                         pa.binary()),
    })
    path = tmp_path / "rows.parquet"
    pq.write_table(table, path, compression="zstd", row_group_size=64)
    budget = 1 << 20
    batches = list(row_texts(path, 5000, batch_bytes=budget))
    texts = [text for batch in batches for text in batch]
    assert len(texts) == rows
    row = 71_000  # about one row's text
    assert all(sum(map(len, batch)) <= budget + row for batch in batches)
    assert len(batches) >= rows * row // budget
    refused = texts[150]
    assert isinstance(refused, Refused) and refused.startswith("column 'blob' decodes to")
    first = json.loads(texts[0])
    assert first["prompt"] == long and first["tags"] == [["k", ""]] and first["pair"] == [0, 0]
    assert json.loads(texts[199])["plain"].startswith("199p")


def test_jsonl_lines_are_read_a_byte_budget_at_a_time(tmp_path):
    from dinfer_batch.jobs.intake.ingest import _text_batches
    from dinfer_batch.jobs.intake.parquet_input import BATCH_BYTES

    path = tmp_path / "long.jsonl"
    line = json.dumps({"prompt": "p" * (1 << 20)}) + "\n"  # about 1 MB a line
    path.write_text(line * 40 + '{"prompt": "short"}\n' * 3)
    batches = list(_text_batches(path, None))
    assert [text for batch in batches for text in batch.texts] == [line] * 40 + [
        '{"prompt": "short"}\n'] * 3
    assert all(sum(map(len, batch.texts)) <= BATCH_BYTES + len(line) for batch in batches)
    assert [batch.first_line for batch in batches][:2] == [1, 1 + len(batches[0].texts)]
    assert len(batches) >= 40 * len(line) // BATCH_BYTES
