"""A model's answer with a NUL in it (a byte-fallback token such as LLaDA's <0x00> decodes
to one) through `dinfer-batch run` and `results`, on SQLite and on PostgreSQL, whose text
type holds no NUL: every line completes, and its result carries the exact text."""

import json

import pytest
from alembic import command
from sqlalchemy import select, text

from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Item
from tests.service_helpers import read_jsonl, write_jsonl
from tests.stand_in_engines import NUL_ANSWER

pytestmark = pytest.mark.integration


def answers(line):
    body = line["response"]["body"]
    if body["object"] == "response":
        return [part["text"] for item in body["output"] for part in item["content"]]
    return [choice.get("text", choice.get("message", {}).get("content"))
            for choice in body["choices"]]


def test_an_answer_with_a_nul_is_stored_and_returned_exactly(service, tmp_path):
    service.env["DINFER_BATCH_ENGINE"] = "tests.stand_in_engines:NulEngine"
    lines = [{"custom_id": "one", "prompt": "a"},
             {"custom_id": "two", "prompt": "b", "n": 2},
             {"custom_id": "chat", "messages": [{"role": "user", "content": "c"}]},
             {"custom_id": "resp", "method": "POST", "url": "/v1/responses",
              "body": {"input": "d"}}]
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    result = service.cli("run", path, "-o", out, "--max-tokens", "8", "--block-length", "8")
    assert result.exit_code == 0, result.output
    job_id = json.loads(service.cli("list", "--json").output)["id"]
    again = tmp_path / "again.jsonl"
    assert service.cli("results", job_id, "-o", again).exit_code == 0
    for written in (out, again):
        results = read_jsonl(written)
        assert [line["custom_id"] for line in results] == ["one", "two", "chat", "resp"]
        assert [answers(line) for line in results] == [[NUL_ANSWER], [NUL_ANSWER] * 2,
                                                       [NUL_ANSWER], [NUL_ANSWER]]
        assert '"4\\u00002\\\\u0000"' in written.read_text()  # the JSON escape of the NUL
    with service.sessions()() as session:
        stored = session.execute(select(Item.output_text, Item.samples, Item.attempts)
                                 .order_by(Item.line)).all()
    assert [row.output_text for row in stored] == [NUL_ANSWER] * 4
    assert [sample["text"] for sample in stored[1].samples] == [NUL_ANSWER] * 2
    assert [row.attempts for row in stored] == [1] * 4  # written at the first try


def migrate(url, revision, down=False):
    config = db.alembic_config()
    with db.db_engine(url).begin() as connection:
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)


def test_answers_stored_before_migration_0020_read_the_same(database_url):
    """Rows written as text (PostgreSQL before 0020) read back unchanged, backslashes and
    JSON look-alikes included, and go back to text on a downgrade."""
    texts = ['plain', 'a "quoted" \\u0000 \\n', '"already json"', '{"a": 1}', None]
    migrate(database_url, "0019")
    with db.db_engine(database_url).begin() as connection:
        connection.execute(text("INSERT INTO items (job_id, line, status, attempts, "
                                "output_text) VALUES ('j', :line, 'completed', 1, :text)"),
                           [{"line": line, "text": value} for line, value in enumerate(texts)])
    migrate(database_url, "head")
    with db.ready(database_url)() as session:
        assert session.scalars(select(Item.output_text).order_by(Item.line)).all() == texts
    migrate(database_url, "0019", down=True)
    with db.db_engine(database_url).begin() as connection:
        assert connection.scalars(text("SELECT output_text FROM items ORDER BY line")).all() \
            == texts
