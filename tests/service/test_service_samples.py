"""`n` samples per request, seeds, templates and duplicate requests, through ingest, the
chunk runner (with the recording stand-in engine) and the output lines."""

import json

import pytest
from sqlalchemy import select

from dinfer_batch.errors import UserError
from dinfer_batch.formats.lines.template import Template, load_template
from dinfer_batch.jobs.intake.ingest import ingest
from dinfer_batch.jobs.reading.results import outputs
from dinfer_batch.jobs.spec import JobSpec
from dinfer_batch.model_info import load_model_info
from dinfer_batch.storage.tables import Item, Job
from dinfer_models import MODELS_DIR
from tests.service.test_service_runner import runner_setup
from tests.service_helpers import env_settings, read_jsonl, write_jsonl


def job_lines(sessions, job_id, per_sample=False):
    with sessions() as session:
        job = session.get(Job, job_id)
    return list(outputs(sessions, job, per_sample))


@pytest.fixture
def setup(database_url, tmp_path, tiny_checkpoint, monkeypatch):
    """The chunk runner with the recording engine, on SQLite and on PostgreSQL."""
    return runner_setup(database_url, tmp_path, tiny_checkpoint, monkeypatch)


def test_n_samples_are_rows_of_one_engine_call_with_consecutive_seeds(setup):
    sessions, engine, submit, run = setup
    job = submit([{"prompt": "a", "n": 3}, {"prompt": "b"}, {"prompt": "c", "n": 2, "seed": 40}])
    run(job.id, 0)
    [call] = engine.calls
    assert call["prompts"] == ["a", "a", "a", "b", "c", "c"]
    assert call["seeds"] == [128, 129, 130, 256, 40, 41]  # 0 + line * 128 + i, or own + i

    first, second, third = job_lines(sessions, job.id)
    body = first["response"]["body"]
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6,
                             "prompt_tokens_details": {"cached_tokens": 0}}
    assert body["metrics"]["seeds"] == [128, 129, 130] and body["metrics"]["nfe"] == 6
    assert len(second["response"]["body"]["choices"]) == 1
    assert third["response"]["body"]["metrics"]["seeds"] == [40, 41]

    split = job_lines(sessions, job.id, per_sample=True)
    assert [line["custom_id"] for line in split] == [
        "line-1-s0", "line-1-s1", "line-1-s2", "line-2-s0", "line-3-s0", "line-3-s1"]
    assert len({line["id"] for line in split}) == 6
    for line in split:
        body = line["response"]["body"]
        assert len(body["choices"]) == 1 and body["choices"][0]["index"] == 0
        assert body["usage"]["completion_tokens"] == 1 and len(body["metrics"]["seeds"]) == 1
    assert [line["response"]["body"]["metrics"]["seeds"][0] for line in split] == [
        128, 129, 130, 256, 40, 41]


def test_identical_requests_run_once_and_every_line_gets_the_result(setup):
    sessions, engine, submit, run = setup
    job = submit([{"prompt": "same", "custom_id": "x"}, {"prompt": "other"},
                  {"prompt": "same", "custom_id": "y"},                 # greedy: seed irrelevant
                  {"prompt": "same", "max_tokens": 16},                 # other parameters
                  {"prompt": "hot", "temperature": 0.5},                # seeds of lines 5 and 6
                  {"prompt": "hot", "temperature": 0.5},
                  {"prompt": "hot", "temperature": 0.5, "seed": 9, "n": 2},
                  {"prompt": "hot", "temperature": 0.5, "seed": 9, "n": 2}])
    assert job.deduplicated_count == 2 and job.chunk_count == 1
    run(job.id, 0)
    prompts = sorted(p for call in engine.calls for p in call["prompts"])
    assert prompts == ["hot", "hot", "hot", "hot", "other", "same", "same"]
    lines = job_lines(sessions, job.id)
    assert [line["custom_id"] for line in lines][:3] == ["x", "line-2", "y"]
    texts = [[c["text"] for c in line["response"]["body"]["choices"]] for line in lines]
    assert texts[0] == texts[2] == ["same!stop here"] and texts[6] == texts[7]
    with sessions() as session:
        job = session.get(Job, job.id)
        duplicates = session.execute(select(Item.line, Item.duplicate_of)
                                     .where(Item.duplicate_of.is_not(None))).all()
    assert sorted(duplicates) == [(3, 1), (8, 7)]
    assert (job.status, job.completed_count, job.failed_count) == ("completed", 8, 0)
    assert job.completion_tokens == 7  # what the engine computed, not the copies


def test_template_renders_each_vars_line_and_names_missing_fields(tmp_path, tiny_checkpoint,
                                                                  sqlite_url):
    from dinfer_batch.storage import db

    sessions = db.ready(sqlite_url)
    model = load_model_info(str(tiny_checkpoint), MODELS_DIR)
    path = write_jsonl(tmp_path / "vars.jsonl", [
        {"topic": "cats", "custom_id": "c1", "n": 2, "max_tokens": 16},
        {"topic": "dogs", "style": "ignored"},
        {"subject": "x"},
        "[1, 2]",
        {"topic": "emus", "n": 0},
    ])
    spec = JobSpec(model=model, queue="q", chunk_size=10,
                   params={"max_tokens": 8, "block_length": 8},
                   seed_base=100)
    job = ingest(sessions, path, spec, env_settings(), Template("write about {topic}. {{ok}}"))
    assert (job.seed_base, job.total_count, job.failed_count) == (100, 5, 3)
    with sessions() as session:
        items = session.scalars(select(Item).order_by(Item.line)).all()
    assert items[0].request == {"prompt": "write about cats. {ok}",
                                "params": {"n": 2, "max_tokens": 16}}
    assert items[0].custom_id == "c1" and items[1].request["params"] == {}
    assert [i.error_message for i in items[2:]] == [
        "line 3: template field 'topic' is missing from the vars line",
        "line 4: expected a JSON object of template variables, got list",
        "line 5: n must be a positive integer, got 0"]

    chat = Template("hi {name}", messages=True).parse('{"name": "Ann"}', 1)
    assert chat.request == {"messages": [{"role": "user", "content": "hi Ann"}], "params": {}}
    template_file = tmp_path / "t.txt"
    template_file.write_text("from a file {x}\n")
    assert load_template(str(template_file)).text == "from a file {x}"
    assert load_template("plain {x}").text == "plain {x}"
    for bad in ("unclosed {x", "{}", "{0}", "{x.__class__}"):
        with pytest.raises(UserError):
            Template(bad)


def test_cli_template_options_are_checked_up_front(sqlite_service, tmp_path):
    vars_file = write_jsonl(tmp_path / "v.jsonl", [{"x": 1}])
    prompts = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a"}])
    cases = [(["run", "--template", "a {x}"], "--template and --vars go together"),
             (["run", prompts, "--template", "a {x}", "--vars", vars_file], "not both"),
             (["run", "--template", "a {", "--vars", vars_file], "invalid template"),
             (["run"], "give a JSONL or Parquet file of requests, or --template and --vars"),
             (["run", prompts, "--n", "500"], "n must be at most 128")]
    for args, message in cases:
        result = sqlite_service.cli(*args)
        assert result.exit_code == 2, result.output
        assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_run_with_a_template_and_samples_end_to_end(sqlite_service, tmp_path):
    vars_file = write_jsonl(tmp_path / "v.jsonl", [{"w": "abc", "custom_id": "a"},
                                                   {"w": "xyz", "custom_id": "b"}])
    out = tmp_path / "out.jsonl"
    result = sqlite_service.cli("run", "--template", "rev {w}=", "--vars", vars_file,
                                "--n", "3", "--temperature", "1.0", "--max-tokens", "8",
                                "--block-length", "8", "--seed-base", "50", "-o", out,
                                "--per-sample")
    assert result.exit_code == 0, result.output
    lines = read_jsonl(out)
    assert [line["custom_id"] for line in lines] == [f"{c}-s{i}" for c in "ab" for i in range(3)]
    seeds = [line["response"]["body"]["metrics"]["seeds"] for line in lines]
    assert seeds == [[50 + 128], [50 + 129], [50 + 130], [50 + 256], [50 + 257], [50 + 258]]
    texts = [line["response"]["body"]["choices"][0]["text"] for line in lines]
    assert len(set(texts)) > 1  # temperature 1 on random weights: samples differ
    again = tmp_path / "again.jsonl"
    sqlite_service.cli("run", "--template", "rev {w}=", "--vars", vars_file, "--n", "3",
                       "--temperature", "1.0", "--max-tokens", "8", "--block-length", "8",
                       "--seed-base", "50", "-o", again, "--per-sample")
    assert [json.loads(x)["response"]["body"]["choices"][0]["text"]
            for x in again.read_text().splitlines()] == texts  # reproducible
