"""Ingest places lines that share a prompt prefix into the same chunks
(jobs/intake/prefix_order.py): an OpenAI file whose prompts interleave templates, chat lines
sharing a system prompt, a template's vars file (kept in input order), duplicates (the
first line still runs) -- on SQLite and PostgreSQL, through `submit` on the real Redis."""

from __future__ import annotations

from sqlalchemy import select

from dinfer_batch.jobs.intake.prefix_order import placing_order, prefix_key
from dinfer_batch.storage.tables import Item
from tests.service_helpers import write_jsonl

TEMPLATES = [f"template {k}: answer like a {kind}, briefly, in plain words. " * 3
             for k, kind in enumerate(("poet", "lawyer", "child"))]


def keys(prompts: list[str]) -> list[bytes]:
    return [prefix_key({"prompt": prompt}) for prompt in prompts]


def test_interleaved_prefixes_are_placed_together_each_at_its_first_line():
    prompts = [TEMPLATES[i % 3] + f"question {i}" for i in range(9)]
    assert placing_order(keys(prompts)) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


def test_lines_that_do_not_interleave_keep_input_order():
    prompts = [TEMPLATES[0] + f"question {i}" * (i % 4 + 1) for i in range(12)]
    prompts += [TEMPLATES[1] + "x" * i for i in range(300)]
    prompts += [f"a prompt of its own {i}" for i in range(5)]
    assert placing_order(keys(prompts)) == list(range(len(prompts)))


def test_a_longer_shared_run_sits_closer():
    a, b = "a" * 200, "b" * 200
    prompts = [a + b + "1", a + "c" * 200, "z", a + b + "2", a + "c" * 200 + "!"]
    assert placing_order(keys(prompts)) == [0, 3, 1, 4, 2]


def test_chat_lines_group_by_their_leading_messages():
    def chat(system: str, user: str) -> dict:
        return {"messages": [{"role": "system", "content": system},
                             {"role": "user", "content": user}]}

    lines = [chat(TEMPLATES[i % 2], f"q{i}") for i in range(6)]
    assert placing_order([prefix_key(line) for line in lines]) == [0, 2, 4, 1, 3, 5]


def chunks_of(service, job_id: str) -> dict[int, list[int]]:
    """Chunk -> its lines (input order)."""
    with service.sessions()() as session:
        rows = session.execute(select(Item.chunk_id, Item.line).where(Item.job_id == job_id)
                               .order_by(Item.line)).all()
    found: dict[int, list[int]] = {}
    for chunk, line in rows:
        found.setdefault(chunk, []).append(line)
    return found


def submit(service, *args) -> str:
    result = service.cli("submit", *args)
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def test_an_openai_file_of_interleaved_templates_is_chunked_by_template(service, tmp_path):
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
              "body": {"model": "m", "prompt": TEMPLATES[i % 3] + f"question {i}",
                       "max_tokens": 32}}
             for i in range(24)]
    lines[7] = lines[7] | {"body": {"prompt": "x", "max_tokens": 32, "decoder": "magic"}}
    lines[10] = lines[10] | {"body": lines[1]["body"]}  # a duplicate of line 2
    job_id = submit(service, write_jsonl(tmp_path / "in.jsonl", lines), "--chunk-size", "4")
    chunks = chunks_of(service, job_id)
    failed = chunks.pop(None)
    assert failed == [8]
    template = {line: (line - 1) % 3 for line in range(1, 25)}
    # cut by cost in that order as before: a template's last chunk takes the next one's
    # first lines while it has room (template 1 runs 6 lines: one failed, one duplicate)
    assert [{template[line] for line in chunks[chunk]} for chunk in sorted(chunks)] == [
        {0}, {0}, {1}, {1, 2}, {2}, {2}]
    assert chunks[2] == [2, 5, 11, 14, 17]  # 11, the duplicate, with line 2 it copies
    with service.sessions()() as session:
        duplicate = session.scalar(select(Item.duplicate_of).where(
            Item.job_id == job_id, Item.line == 11))
    assert duplicate == 2


def test_a_template_vars_file_keeps_input_order(service, tmp_path):
    things = write_jsonl(tmp_path / "vars.jsonl", [{"thing": f"a thing {i}" * (i % 3 + 1)}
                                                   for i in range(10)])
    job_id = submit(service, "--template", TEMPLATES[0] + "Describe {thing}.",
                    "--vars", things, "--max-tokens", "32", "--chunk-size", "4")
    assert list(chunks_of(service, job_id).values()) == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]
