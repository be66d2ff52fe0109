"""Lines and table rows holding control characters, through the command line on SQLite,
then on PostgreSQL (which stores no NUL in text or jsonb): a NUL or a lone surrogate
anywhere fails its line alone, naming the field, under the line's own custom_id; the other
control characters are taken and come back unchanged. A line without a custom_id of its
own reads as line-N and never clashes with another line's (a real-world schema's
"\\u0000" once made a file with ids line-0, line-1, ... be refused as a duplicate)."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from dinfer_batch.storage.tables import Item
from tests.service_helpers import read_jsonl, write_jsonl

pytestmark = pytest.mark.integration

PATH_SCHEMA = {"type": "object", "properties": {"path": {"type": "string",
                                                         "pattern": "^/[^\u0000]+$"}}}
CONTROLS = "tab\t bell\u0007 \u0001\u001f\u007f"


def structured(schema):
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}


def test_control_characters_fail_their_line_alone_or_round_trip(service, tmp_path):
    lines = [
        {"custom_id": "line-0", "prompt": "a"},
        {"custom_id": "line-1", "prompt": "b", "response_format": structured(PATH_SCHEMA)},
        {"custom_id": "line-2", "prompt": "c"},
        {"custom_id": f"id {CONTROLS}", "prompt": CONTROLS, "stop": ["\u0001"]},
        {"custom_id": "nul\u0000", "prompt": "d"},
        {"custom_id": "line-5", "prompt": "e"},
        '{"custom_id": "lone", "prompt": "\\ud800"}',
        "{not json",
        {"custom_id": "line-8", "prompt": "f"},
    ]
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    out, errors = tmp_path / "out.jsonl", tmp_path / "errors.jsonl"
    result = service.cli("run", path, "-o", out, "--errors", errors, "--max-tokens", "8",
                         "--block-length", "8")
    assert result.exit_code == 0, result.output
    assert [line["custom_id"] for line in read_jsonl(out)] == [
        "line-0", "line-2", f"id {CONTROLS}", "line-5", "line-8"]
    assert [(line["custom_id"], line["error"]["message"]) for line in read_jsonl(errors)] == [
        ("line-1", "line 2: response_format.json_schema.schema.properties.path.pattern "
                   "contains a NUL character"),
        ("line-5", "line 5: custom_id contains a NUL character"),
        ("lone", "line 7: prompt is not valid UTF-8 text (invalid bytes in the file, or a "
                 "lone surrogate escape such as \\ud800)"),
        ("line-8", "line 8: invalid JSON at column 2: Expecting property name enclosed in "
                   "double quotes")]
    with service.sessions()() as session:
        stored = session.execute(select(Item.custom_id, Item.request)
                                 .where(Item.line == 4)).one()
    assert stored.custom_id == f"id {CONTROLS}"
    assert stored.request["prompt"] == CONTROLS
    assert stored.request["params"]["stop"] == ["\u0001"]
    assert json.loads(out.read_text().splitlines()[2])["custom_id"] == f"id {CONTROLS}"


def test_a_table_row_with_a_nul_fails_alone_under_its_id_column(service, tmp_path):
    table = pa.table({"key": ["k1", "k2", "k3", "k4"],
                      "question": ["a", "b\u0000", f"c{CONTROLS}", "d"],
                      "note": ["x", "y", "z", "w\u0000"]})
    source = tmp_path / "in.parquet"
    pq.write_table(table, source)
    result = service.cli("submit", source, "--prompt-column", "question", "--id-column",
                         "key")
    assert result.exit_code == 0, result.output
    with service.sessions()() as session:
        items = session.execute(select(Item.custom_id, Item.status, Item.error_message,
                                       Item.request).order_by(Item.line)).all()
    assert [(item.custom_id, item.status, item.error_message) for item in items] == [
        ("k1", "pending", None),
        ("k2", "failed", "line 2: question contains a NUL character"),
        ("k3", "pending", None),
        ("k4", "failed", "line 4: note contains a NUL character")]
    assert items[2].request["prompt"] == f"c{CONTROLS}"
