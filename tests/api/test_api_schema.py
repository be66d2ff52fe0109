"""Schemathesis against the live server's /openapi.json with a valid key: no 5xx for
anything it generates, and every response matches the schema (status codes, content
types, bodies). A bounded run: a few examples per operation, a fixed seed."""

import json
import subprocess
import sys

import pytest

from tests.service_helpers import write_jsonl

pytestmark = pytest.mark.integration

CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance")


def test_schemathesis_finds_no_server_error_and_no_schema_mismatch(sqlite_api, tmp_path):
    client = sqlite_api.client()
    path = write_jsonl(tmp_path / "in.jsonl", [
        {"custom_id": "a", "method": "POST", "url": "/v1/completions",
         "body": {"prompt": "add 1 2=", "max_tokens": 8, "block_length": 8}}])
    file_id = client.files.create(file=path.open("rb"), purpose="batch").id
    batch_id = client.batches.create(input_file_id=file_id, endpoint="/v1/completions",
                                     completion_window="24h").id
    config = tmp_path / "schemathesis.toml"  # real ids, so operations get past 404
    config.write_text(f"[parameters]\nfile_id = {json.dumps(file_id)}\n"
                      f"batch_id = {json.dumps(batch_id)}\n")
    run = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run",
         f"{sqlite_api.url}/openapi.json", "-H",
         f"Authorization: Bearer {sqlite_api.keys['alice']}", "--checks", CHECKS,
         "--max-examples", "10", "--seed", "7", "--generation-database", "none",
         "--phases", "examples,coverage,fuzzing", "--workers", "1", "--no-color"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    # every operation was exercised (13: HEAD of a file's content is one of them)
    assert "13 selected / 13 total" in run.stdout
