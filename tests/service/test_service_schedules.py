"""Schedules with real `dinfer-batch beat` and `dinfer-batch worker` processes on the real
Redis, with SQLite and PostgreSQL: runs become completed jobs with their samples and seeds,
pause stops runs, remove keeps the jobs, two beats make each run once, runs that cannot
start are skipped with the reason, and bad schedules are refused with nothing stored."""

import json
import os
import subprocess
import sys
import time
from datetime import datetime

import pytest
from alembic import command
from sqlalchemy import inspect, select

from dinfer_batch.errors import UserError
from dinfer_batch.schedules.triggers import next_time
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Job, ScheduleRun
from dinfer_engine import GenerationConfig
from tests.engine_requests import asked
from tests.service_helpers import read_jsonl, wait_for, write_jsonl

pytestmark = pytest.mark.integration

SHORT = ("--max-tokens", "8", "--block-length", "8")


def start_beats(service, *logs):
    """Real `dinfer-batch beat` processes, started together (stopped with the service's
    workers); returns once each reads the schedules."""
    processes = [subprocess.Popen(
        [sys.executable, "-m", "dinfer_batch", "beat", "--interval", "0.2"],
        env=os.environ | service.env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        for log in logs]
    service.workers.extend(processes)
    def up(process, log):
        return "reading schedules" in log.read_text() or process.poll() is not None

    wait_for(lambda: all(up(p, log) for p, log in zip(processes, logs, strict=True)), 60)
    for process, log in zip(processes, logs, strict=True):
        assert process.poll() is None, log.read_text()
    return processes


def show(service, name):
    result = service.cli("schedule", "show", name, "--json", "--runs", "100")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def cli_ok(service, *args):
    result = service.cli(*args)
    assert result.exit_code == 0, result.output
    return result.output.strip()


def test_a_schedule_makes_jobs_until_paused_and_its_jobs_outlive_it(service, tmp_path,
                                                                     tiny_engine):
    vars_file = write_jsonl(tmp_path / "vars.jsonl", [{"w": "abc", "custom_id": "a"},
                                                      {"w": "xyz", "custom_id": "b"}])
    service.start_worker(tmp_path / "worker.log")
    service.env["DINFER_BATCH_MIN_EVERY"] = "1"  # the default floor is 10 s
    cli_ok(service, "schedule", "add", "synth", "--every", "1s", "--template", "rev {w}=",
           "--vars", vars_file, "--n", "2", "--temperature", "1.0", *SHORT)
    [beat] = start_beats(service, tmp_path / "beat.log")

    def completed_runs():
        return [r for r in show(service, "synth")["runs"] if r["job_status"] == "completed"]

    wait_for(lambda: len(completed_runs()) >= 2, 120, poll=0.5)
    assert cli_ok(service, "schedule", "pause", "synth") == "synth paused"
    made = len(show(service, "synth")["runs"])
    time.sleep(2.5)  # two intervals and more
    assert len(show(service, "synth")["runs"]) == made and beat.poll() is None
    listed = json.loads(cli_ok(service, "schedule", "list", "--json"))
    assert (listed["name"], listed["trigger"], listed["paused"]) == ("synth", "every 1s", True)

    runs = completed_runs()[:2]
    assert runs[0]["seed_base"] != runs[1]["seed_base"]  # each run makes new data
    for run in runs:
        job = service.job(run["job_id"])
        assert job.meta["schedule"] == "synth" and job.meta["run"] == run["due"]
        assert job.seed_base == run["seed_base"] and job.status == "completed"
        out = tmp_path / f"{job.id}.jsonl"
        cli_ok(service, "results", job.id, "-o", out, "--per-sample")
        lines = read_jsonl(out)
        assert [line["custom_id"] for line in lines] == ["a-s0", "a-s1", "b-s0", "b-s1"]
        seeds = [line["response"]["body"]["metrics"]["seeds"][0] for line in lines]
        assert seeds == [job.seed_base + line * 128 + i for line in (1, 2) for i in (0, 1)]
        # each sample is what the engine gives that prompt alone with that seed
        config = GenerationConfig(gen_length=8, block_length=8, temperature=1.0)
        for line, prompt, seed in zip(lines, ["rev abc="] * 2 + ["rev xyz="] * 2, seeds,
                                      strict=True):
            [alone] = tiny_engine.generate(asked([prompt], seeds=[seed]), config)
            assert line["response"]["body"]["choices"][0]["text"] == alone.text

    assert cli_ok(service, "schedule", "remove", "synth").startswith("synth removed")
    assert service.cli("schedule", "show", "synth").exit_code == 2
    assert service.cli("status", runs[0]["job_id"]).exit_code == 0  # the job stays


def test_two_beats_make_each_run_once(service, tmp_path):
    prompts = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "abc"}])
    service.env["DINFER_BATCH_MIN_EVERY"] = "1"
    cli_ok(service, "schedule", "add", "twice", "--every", "1s", "--overlap", prompts, *SHORT)
    first, second = start_beats(service, tmp_path / "beat1.log", tmp_path / "beat2.log")
    wait_for(lambda: len(show(service, "twice")["runs"]) >= 3, 60, poll=0.5)
    cli_ok(service, "schedule", "pause", "twice")
    wait_for(lambda: all(r["status"] != "starting" for r in show(service, "twice")["runs"]), 30)
    with service.sessions()() as session:
        runs = session.scalars(select(ScheduleRun).order_by(ScheduleRun.due_at)).all()
        jobs = session.scalars(select(Job)).all()
    assert all(r.status == "created" for r in runs), [(r.status, r.reason) for r in runs]
    dues = [r.due_at for r in runs]
    assert len(set(dues)) == len(dues)
    assert all(b - a >= 1 for a, b in zip(dues, dues[1:], strict=False))  # none doubled
    assert sorted(j.id for j in jobs) == sorted(r.job_id for r in runs)
    assert len({j.meta["run"] for j in jobs}) == len(jobs)
    assert first.poll() is None and second.poll() is None


def test_runs_that_cannot_start_are_skipped_with_the_reason(sqlite_service, tmp_path):
    service = sqlite_service  # no worker: jobs stay in progress
    prompts = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "abc"}])
    vars_file = write_jsonl(tmp_path / "v.jsonl", [{"w": "abc"}])
    cli_ok(service, "schedule", "add", "busy", "--cron", "0 3 * * *", prompts, *SHORT)
    cli_ok(service, "schedule", "add", "fixed", "--every", "1d", "--overlap", "--same-seeds",
           "--seed-base", "7", "--template", "rev {w}=", "--vars", vars_file, *SHORT)

    job_id = cli_ok(service, "schedule", "run", "busy")
    again = service.cli("schedule", "run", "busy")
    assert again.exit_code == 1 and f"previous run's job {job_id} is still in_progress" \
        in again.output
    first, second = (cli_ok(service, "schedule", "run", "fixed") for _ in range(2))
    assert service.job(first).seed_base == service.job(second).seed_base == 7
    vars_file.unlink()
    missing = service.cli("schedule", "run", "fixed")
    assert missing.exit_code == 1 and f"input file not found: {vars_file}" in missing.output

    runs = show(service, "fixed")["runs"]
    assert [r["status"] for r in runs] == ["skipped", "created", "created"]
    busy = show(service, "busy")
    assert busy["trigger"] == "cron 0 3 * * *" and busy["last_run"]["status"] == "skipped"
    assert datetime.fromisoformat(busy["next_run"]).astimezone().hour == 3
    table = cli_ok(service, "schedule", "list")
    assert "busy" in table and "fixed" in table and "skipped" in table


def test_bad_schedules_are_refused_and_nothing_is_stored(sqlite_service, tmp_path):
    service = sqlite_service
    prompts = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "abc"}])
    cli_ok(service, "schedule", "add", "ok", "--every", "1h", prompts)
    cases = [(["--cron", "61 * * * *", prompts], "bad cron expression '61 * * * *'"),
             (["--cron", "* * * *", prompts], "expected 5 fields"),
             (["--every", "10x", prompts], "bad duration '10x'"),
             (["--every", "0s", prompts], "bad duration '0s'"),
             (["--every", "1h", "--cron", "* * * * *", prompts], "exactly one of --cron"),
             ([prompts], "exactly one of --cron"),
             (["--every", "1h"], "give a JSONL or Parquet file of requests"),
             (["--every", "1h", "--model", tmp_path / "nope", prompts], "unknown model"),
             (["--every", "1h", "--template", "{", "--vars", prompts], "invalid template")]
    for args, message in cases:
        result = service.cli("schedule", "add", "bad", *args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and len(result.output.strip().splitlines()) == 1
    taken = service.cli("schedule", "add", "ok", "--every", "2h", prompts)
    assert taken.exit_code == 2 and "a schedule named 'ok' already exists" in taken.output
    listed = [json.loads(x) for x in cli_ok(service, "schedule", "list", "--json").splitlines()]
    assert [(s["name"], s["trigger"]) for s in listed] == [("ok", "every 1h")]
    assert service.cli("schedule", "pause", "nope").exit_code == 2


def test_next_times_keep_the_cadence_and_follow_cron():
    assert next_time("every", "10s", after=100.0, anchor=100.0) == 110.0
    assert next_time("every", "10s", after=135.0, anchor=100.0) == 140.0  # missed: skipped
    start = datetime(2026, 3, 1, 10, 7).timestamp()
    due = datetime.fromtimestamp(next_time("cron", "*/15 * * * *", start, start))
    assert (due.hour, due.minute) == (10, 15)
    nightly = datetime.fromtimestamp(next_time("cron", "0 2 * * *", start, start))
    assert (nightly.day, nightly.hour, nightly.minute) == (2, 2, 0)


def test_a_database_at_an_older_schema_is_upgraded_or_refused(database_url):
    config = db.alembic_config()
    with db.db_engine(database_url).begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0001")  # as left by the first release
    if database_url.startswith("sqlite"):
        db.ready(database_url)  # the embedded default migrates itself
    else:
        with pytest.raises(UserError, match=r"older schema \(0001\).*db upgrade"):
            db.ready(database_url)
        db.upgrade(database_url)
        db.ready(database_url)
    schema = inspect(db.db_engine(database_url))
    assert "schedules" in schema.get_table_names()
    if not database_url.startswith("sqlite"):  # 0005: no per-row check in bulk writes
        assert schema.get_foreign_keys("items") == []
