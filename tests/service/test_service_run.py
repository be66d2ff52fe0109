"""The embedded default: `dinfer-batch run FILE -o OUT` in one process on SQLite."""

import json
import os
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from dinfer_batch.cli import main
from dinfer_batch.jobs.running import chunk_state
from dinfer_engine.choices import FAMILIES
from tests.service_helpers import read_jsonl, write_jsonl


def test_run_writes_openai_batch_output_in_input_order(sqlite_service, tmp_path):
    lines = [
        {"prompt": "add 1 2=", "custom_id": "first"},
        "not json",
        {"messages": [{"role": "user", "content": "hello"}], "custom_id": "chat"},
        {"custom_id": "openai", "method": "POST", "url": "/v1/completions",
         "body": {"prompt": "abc", "max_tokens": 16, "block_length": 16, "stop": "a"}},
    ]
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    out, errors = tmp_path / "out.jsonl", tmp_path / "errors.jsonl"
    result = sqlite_service.cli("run", path, "-o", out, "--errors", errors,
                                "--max-tokens", "8", "--block-length", "8")
    assert result.exit_code == 0, result.output
    ok, failed = read_jsonl(out), read_jsonl(errors)
    assert [line["custom_id"] for line in ok] == ["first", "chat", "openai"]
    first, chat, openai = (line["response"]["body"] for line in ok)
    assert first["object"] == "text_completion" and chat["object"] == "chat.completion"
    assert isinstance(chat["choices"][0]["message"]["content"], str)
    assert chat["id"].startswith("chatcmpl-") and first["id"].startswith("cmpl-")
    assert chat["choices"][0]["logprobs"] is None is first["choices"][0]["logprobs"]
    assert first["usage"]["prompt_tokens"] == len("add 1 2=")
    assert first["usage"]["completion_tokens"] <= 8
    assert first["metrics"]["nfe"] >= 1 and first["metrics"]["latency_s"] > 0
    assert "a" not in openai["choices"][0]["text"]
    assert all(line["error"] is None and line["response"]["status_code"] == 200 for line in ok)
    assert failed == [{"id": failed[0]["id"], "custom_id": "line-2", "response": None,
                       "error": {"code": "invalid_request",
                                 "message": failed[0]["error"]["message"]}}]
    assert failed[0]["error"]["message"].startswith("line 2: invalid JSON")

    listed = json.loads(sqlite_service.cli("list", "--json").output)
    assert listed["status"] == "completed"
    assert listed["request_counts"] == {"total": 4, "completed": 3, "failed": 1}
    assert listed["usage"]["completion_tokens"] > 0


def test_run_of_a_file_with_no_valid_line_exits_1(sqlite_service, tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", ["{bad", '{"prompt": 3}'])
    result = sqlite_service.cli("run", path)
    assert result.exit_code == 1
    assert "job failed" in result.output


@pytest.mark.parametrize("command", ["submit", "run", "status", "results", "list", "worker"])
def test_help_teaches_each_command_by_example(sqlite_service, command):
    result = sqlite_service.cli(command, "--help")
    assert result.exit_code == 0 and "Usage:" in result.output
    assert f"\n      dinfer-batch {command} " in result.output  # an indented example


def test_main_help_shows_both_modes(sqlite_service):
    result = sqlite_service.cli("--help")
    assert result.exit_code == 0
    assert "dinfer-batch run prompts.jsonl" in result.output
    assert "dinfer-batch submit prompts.jsonl" in result.output
    named = result.output.split("\n\n")[1]  # the first line names every family
    assert all(family.name in named for family in FAMILIES.values())


@pytest.mark.parametrize(("command", "device", "message"), [
    ("run", "gpu", "unknown device 'gpu'"),
    ("worker", "gpu", "unknown device 'gpu'"),
    ("run", "mps", "unsupported device 'mps'"),
    pytest.param("run", "cuda:0", "device 'cuda:0' is not available",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="has a GPU")),
    pytest.param("worker", "cuda:3", "device 'cuda:3' is not available",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="has a GPU")),
])
def test_a_device_that_cannot_run_is_a_usage_error_before_any_job(sqlite_service, tmp_path,
                                                                   monkeypatch, command, device,
                                                                   message):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # undone after the test: a worker pins its GPU
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "add 1 2="}])
    args = ["run", path] if command == "run" else ["worker"]
    result = sqlite_service.cli(*args, "--device", device)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert sqlite_service.cli("list", "--json").output == ""


def test_results_piped_into_head_stop_quietly(sqlite_service, tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", ["{bad"] * 2000)  # ~400 kB of results
    sqlite_service.cli("run", path)
    job_id = json.loads(sqlite_service.cli("list", "--json").output)["id"]
    reader = subprocess.Popen([sys.executable, "-m", "dinfer_batch", "results", job_id],
                              env=os.environ | sqlite_service.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    assert json.loads(reader.stdout.readline())["custom_id"] == "line-1"
    reader.stdout.close()  # as `| head -n 1` does
    assert reader.wait(60) == 0
    assert reader.stderr.read() == b""


def test_list_fits_80_columns_without_cutting_ids_or_statuses(sqlite_service, tmp_path,
                                                              monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "add 1 2="}, "{bad"])
    result = sqlite_service.cli("run", path, "--max-tokens", "8", "--block-length", "8")
    assert result.exit_code == 0, result.output
    job_id = json.loads(sqlite_service.cli("list", "--json").output)["id"]
    header, row = sqlite_service.cli("list").output.splitlines()
    assert header.split() == ["id", "status", "done", "failed", "total", "model"]
    assert row.split() == [job_id, "completed", "2", "1", "2", sqlite_service.model.name]


@pytest.mark.parametrize(("url", "message"), [
    ("foo", "DINFER_BATCH_DATABASE_URL='foo' is not a database URL"),
    ("postgresql+psycopg://postgres@127.0.0.1:1/x",
     "cannot connect to the database postgresql+psycopg://postgres@127.0.0.1:1/x"),
])
@pytest.mark.parametrize("command", [["list"], ["db", "upgrade"]])
def test_a_bad_database_url_is_a_usage_error(url, message, command):
    result = CliRunner().invoke(main, command, env={"DINFER_BATCH_DATABASE_URL": url})
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_a_worker_for_a_model_that_is_not_there_does_not_start(sqlite_service):
    result = sqlite_service.cli("worker", "--model", "/nonexistent/model")
    assert result.exit_code == 2, result.output
    assert "unknown model '/nonexistent/model'" in result.output


@pytest.mark.parametrize("args", [["-o", "{tmp}/missing/out.jsonl"], ["--errors", "{tmp}"]])
def test_an_output_that_cannot_be_written_is_refused_before_the_job(sqlite_service, tmp_path,
                                                                     args):
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "add 1 2="}])
    result = sqlite_service.cli("run", path, *[a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == 2, result.output
    assert "Invalid value for" in result.output
    assert sqlite_service.cli("list", "--json").output == ""


def test_bad_worker_and_engine_settings_are_usage_errors(sqlite_service, tmp_path, monkeypatch):
    result = sqlite_service.cli("worker", "--queues", ",")
    assert result.exit_code == 2 and "no queue in ','" in result.output
    monkeypatch.setenv("DINFER_BATCH_ENGINE_BATCH", "abc")
    result = sqlite_service.cli("run", write_jsonl(tmp_path / "in.jsonl", [{"prompt": "a"}]))
    assert result.exit_code == 2
    assert "DINFER_BATCH_ENGINE_BATCH='abc' must be a positive integer" in result.output
    monkeypatch.delenv("DINFER_BATCH_ENGINE_BATCH")
    monkeypatch.setenv("DINFER_BATCH_KERNELS", "cuda")
    result = sqlite_service.cli("run", write_jsonl(tmp_path / "in.jsonl", [{"prompt": "a"}]))
    assert result.exit_code == 2
    assert "DINFER_BATCH_KERNELS='cuda': expected one of auto, torch, triton" in result.output
    result = sqlite_service.cli("list", "--json")  # every command reads every setting first
    assert result.exit_code == 2 and "DINFER_BATCH_KERNELS='cuda'" in result.output
    monkeypatch.delenv("DINFER_BATCH_KERNELS")
    assert sqlite_service.cli("list", "--json").output == ""


def test_a_run_that_crashes_ends_its_job_failed(sqlite_service, tmp_path, monkeypatch):
    def crash(*_):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(chunk_state, "claim", crash)
    result = sqlite_service.cli("run", write_jsonl(tmp_path / "in.jsonl", [{"prompt": "a"}]))
    assert result.exit_code == 1 and "RuntimeError: disk on fire" in result.output
    job = json.loads(sqlite_service.cli("list", "--json").output)
    assert job["status"] == "failed"
    assert job["errors"] == {"object": "list",
                             "data": [{"message": "RuntimeError: disk on fire"}]}


def test_results_page_through_gaps_in_line_numbers(sqlite_service, tmp_path, monkeypatch):
    monkeypatch.setattr("dinfer_batch.jobs.reading.results.PAGE", 3)
    path = write_jsonl(tmp_path / "in.jsonl", ["{bad"] * 4 + [""] * 7 + ["{bad"] * 5)
    assert sqlite_service.cli("run", path).exit_code == 1  # every line failed
    job_id = json.loads(sqlite_service.cli("list", "--json").output)["id"]
    out = tmp_path / "out.jsonl"
    assert sqlite_service.cli("results", job_id, "-o", out).exit_code == 0
    assert [line["custom_id"] for line in read_jsonl(out)] == (
        [f"line-{n}" for n in range(1, 5)] + [f"line-{n}" for n in range(12, 17)])
