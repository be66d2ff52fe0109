"""The prefix cache through the service: lines sharing a prompt prefix on a tiny LLaDA2
report the prompt tokens they reused in their metrics, and their texts are those of a
worker without the cache (DINFER_BATCH_PREFIX_CACHE_MB=0), which reports nothing; real
workers on the real Redis run an interleaved file's lines by template, in chunks that
compute each prefix once, and a killed worker loses only its cache."""

from __future__ import annotations

import signal
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from dinfer_batch.api.ops import _scrape
from dinfer_batch.cli import main
from dinfer_batch.statuses import ENDED
from dinfer_batch.storage.registry import live_workers
from dinfer_batch.storage.tables import Chunk, Item, Worker
from tests.service_helpers import read_jsonl, wait_for, write_jsonl
from tests.tiny_moe import write_tiny_moe

SHARED = "you answer in one word. question: "


def run_lines(service, checkpoint: Path, lines: list[dict], out: Path,
              megabytes: str) -> list[dict]:
    result = CliRunner().invoke(main, [
        "run", str(write_jsonl(out.with_suffix(".in.jsonl"), lines)), "-o", str(out),
        "--model", str(checkpoint), "--max-tokens", "8", "--block-length", "8"],
        env=service.env | {"DINFER_BATCH_PREFIX_CACHE_MB": megabytes})
    assert result.exit_code == 0, result.output
    return [line["response"]["body"] for line in read_jsonl(out)]


def test_lines_sharing_a_prefix_report_reused_tokens(sqlite_service, tmp_path):
    checkpoint = write_tiny_moe(tmp_path / "llada2", "llada2")
    lines = [{"prompt": SHARED + tail} for tail in ("cats?", "dogs?", "the sea?", "rain?")]
    lines.append({"prompt": "a prompt of its own, long enough for blocks"})
    on = run_lines(sqlite_service, checkpoint, lines, tmp_path / "on.jsonl", "64")
    off = run_lines(sqlite_service, checkpoint, lines, tmp_path / "off.jsonl", "0")
    assert [b["choices"][0]["text"] for b in on] == [b["choices"][0]["text"] for b in off]
    reused = [b["metrics"]["prefix_tokens_reused"] for b in on]
    whole = len(SHARED) // 8 * 8  # the shared whole blocks (at least; one row computes them)
    first, *others = sorted(reused[:4])
    assert first == 0 and whole > 0 and all(r >= whole for r in others)
    assert reused[4] == 0
    assert all("prefix_tokens_reused" not in b["metrics"] for b in off)


def test_a_bad_budget_is_a_usage_error(sqlite_service, tmp_path, monkeypatch):
    for value in ("abc", "-1", "1.5"):
        monkeypatch.setenv("DINFER_BATCH_PREFIX_CACHE_MB", value)
        result = sqlite_service.cli("run", write_jsonl(tmp_path / "in.jsonl", [{"prompt": "a"}]))
        assert result.exit_code == 2, result.output
        assert f"DINFER_BATCH_PREFIX_CACHE_MB={value!r} must be an integer >= 0" in result.output
    monkeypatch.delenv("DINFER_BATCH_PREFIX_CACHE_MB")  # every command reads every setting
    assert sqlite_service.cli("list", "--json").output == ""


TEMPLATES = [f"{kind} {k}: you answer like a {kind}, in one word, no more. question: "
             for k, kind in enumerate(("poet", "judge", "child"))]  # over 64 characters


def llada2_service(service, checkpoint: Path):
    """The service, its workers and submissions on a tiny LLaDA2 (block-causal: it has a
    prefix cache)."""
    return replace(service, model=checkpoint,
                   env=service.env | {"DINFER_BATCH_MODEL": str(checkpoint)})


def submit(service, path: Path, *args: str) -> str:
    result = service.cli("submit", path, "--max-tokens", "8", "--block-length", "8", *args)
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def results_of(service, job_id: str, out: Path) -> list[dict]:
    assert service.cli("results", job_id, "-o", out).exit_code == 0
    return read_jsonl(out)


def chunk_lines(service, job_id: str) -> dict[int, list[int]]:
    with service.sessions()() as session:
        rows = session.execute(select(Item.chunk_id, Item.line)
                               .where(Item.job_id == job_id).order_by(Item.line)).all()
    found: dict[int, list[int]] = {}
    for chunk, line in rows:
        found.setdefault(chunk, []).append(line)
    return found


@pytest.mark.integration
def test_interleaved_prefixes_run_in_the_same_chunks_with_results_in_input_order(
        service, tmp_path):
    """An OpenAI file interleaving three templates: each chunk holds one template's lines,
    each chunk computes its template's blocks once (one line reuses nothing, the others
    all of them), and results come back in input order with the texts of a worker
    without the cache."""
    service = llada2_service(service, write_tiny_moe(tmp_path / "llada2", "llada2"))
    prompts = [TEMPLATES[i % 3] + f"item {i}?" for i in range(12)]
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
              "body": {"model": "m", "prompt": prompt}} for i, prompt in enumerate(prompts)]
    service.start_worker(tmp_path / "worker.log", DINFER_BATCH_HEARTBEAT="0.5")
    job_id = submit(service, write_jsonl(tmp_path / "in.jsonl", lines), "--chunk-size", "4")
    job = service.wait_job(job_id, lambda j: j.status in ENDED)
    assert (job.status, job.completed_count) == ("completed", 12)
    assert sorted(chunk_lines(service, job_id).values()) == [
        [1, 4, 7, 10], [2, 5, 8, 11], [3, 6, 9, 12]]
    out = results_of(service, job_id, tmp_path / "out.jsonl")
    assert [line["custom_id"] for line in out] == [f"r{i}" for i in range(12)]
    bodies = [line["response"]["body"] for line in out]
    off = run_lines(service, service.model, [{"prompt": p} for p in prompts],
                    tmp_path / "off.jsonl", "0")
    assert [b["choices"][0]["text"] for b in bodies] == [b["choices"][0]["text"] for b in off]
    whole = min(len(t) for t in TEMPLATES) // 8 * 8
    for template in range(3):
        first, *others = [bodies[i]["metrics"]["prefix_tokens_reused"]
                          for i in range(template, 12, 3)]
        assert first == 0 and whole > 0 and all(r >= whole for r in others)

    # the worker's heartbeat sums its lines' reuse; /metrics shows it by worker name
    total = sum(b["metrics"]["prefix_tokens_reused"] for b in bodies)
    wait_for(lambda: worker_totals(service) == [total], 30)
    [name] = [w.name for w in live_workers(service.sessions(), 60)]
    scraped = _scrape(service.sessions(), 60).decode()
    assert (f'dinfer_batch_worker_prefix_tokens_reused_total{{worker="{name}"}} '
            f"{float(total)}") in scraped


def worker_totals(service) -> list[int]:
    with service.sessions()() as session:
        return list(session.scalars(select(Worker.prefix_tokens_reused)))


def test_a_killed_worker_loses_only_its_cache(sqlite_service, tmp_path):
    """A worker killed mid-chunk: another runs the chunk's rest, computing the shared
    prefix again (its first line reuses nothing) and reusing it after; every line is
    written once, with the texts of a worker without the cache."""
    service = llada2_service(sqlite_service, write_tiny_moe(tmp_path / "llada2", "llada2"))
    prompts = [SHARED + f"item {i}?" for i in range(40)]
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": p, "custom_id": f"c{i}"}
                                               for i, p in enumerate(prompts)])
    # one request per engine call, so the job is caught mid-way; the reaper gives the
    # chunk back once the dead worker's heartbeat is 3 s old
    env = {"DINFER_BATCH_ENGINE_BATCH": "1", "DINFER_BATCH_WORKER_TIMEOUT": "3",
           "DINFER_BATCH_HEARTBEAT": "1"}
    first = service.start_worker(tmp_path / "first.log", **env)
    job_id = submit(service, path, "--chunk-size", "40")
    service.wait_job(job_id, lambda j: j.completed_count >= 3)
    first.send_signal(signal.SIGKILL)
    first.wait()
    with service.sessions()() as session:
        before = set(session.scalars(select(Item.line).where(Item.status != "pending")))
    assert 3 <= len(before) < 40

    service.start_worker(tmp_path / "second.log", **env)
    job = service.wait_job(job_id, lambda j: j.status in ENDED)
    assert (job.status, job.completed_count, job.failed_count) == ("completed", 40, 0)
    with service.sessions()() as session:
        assert session.scalar(select(Chunk.attempts)) == 2
    bodies = [line["response"]["body"] for line in results_of(service, job_id,
                                                              tmp_path / "out.jsonl")]
    off = run_lines(service, service.model, [{"prompt": p} for p in prompts],
                    tmp_path / "off.jsonl", "0")
    assert [b["choices"][0]["text"] for b in bodies] == [b["choices"][0]["text"] for b in off]
    reused = [b["metrics"]["prefix_tokens_reused"] for b in bodies]
    whole = len(SHARED) // 8 * 8
    for worker_lines in (sorted(before), sorted(set(range(1, 41)) - before)):
        first_line, *others = [reused[line - 1] for line in worker_lines]
        assert first_line == 0 and all(r >= whole for r in others)
