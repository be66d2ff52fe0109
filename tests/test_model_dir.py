"""`--model` as a name under DINFER_BATCH_MODEL_DIR: the job stores the name (not this
machine's path), output lines show it, and a worker resolves it in its own model
directory."""

import json

from tests.service_helpers import read_jsonl, write_jsonl

pytest_plugins = ["tests.service_fixtures"]


def test_model_name_under_the_model_dir_is_stored_and_shown(sqlite_service, tmp_path,
                                                           tiny_checkpoint):
    service = sqlite_service
    service.env["DINFER_BATCH_MODEL_DIR"] = str(tiny_checkpoint.parent)
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "add 1 2="}])
    out = tmp_path / "out.jsonl"
    result = service.cli("run", path, "-o", out, "--model", tiny_checkpoint.name,
                         "--max-tokens", "4", "--block-length", "4")
    assert result.exit_code == 0, result.output
    [line] = read_jsonl(out)
    assert line["response"]["body"]["model"] == tiny_checkpoint.name
    job = json.loads(service.cli("list", "--json").output)
    assert job["model"] == tiny_checkpoint.name

    missing = service.cli("run", path, "--model", "no-such-model")
    assert missing.exit_code == 2
    assert f"nor under DINFER_BATCH_MODEL_DIR={tiny_checkpoint.parent}" in missing.output


def test_a_model_outside_the_model_dir_keeps_its_path(sqlite_service, tmp_path,
                                                      tiny_checkpoint):
    service = sqlite_service
    service.env["DINFER_BATCH_MODEL_DIR"] = str(tmp_path)
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "add 1 2="}])
    result = service.cli("run", path, "--model", tiny_checkpoint, "--max-tokens", "4",
                         "--block-length", "4")
    assert result.exit_code == 0, result.output
    assert json.loads(service.cli("list", "--json").output)["model"] == str(tiny_checkpoint)


def test_the_bundled_demo_model_is_named_demo_by_default(sqlite_service, tmp_path):
    service = sqlite_service
    service.env.pop("DINFER_BATCH_MODEL_DIR", None)
    service.env.pop("DINFER_BATCH_MODEL", None)
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "add 1 2="}])
    out = tmp_path / "out.jsonl"
    result = service.cli("run", path, "-o", out, "--max-tokens", "24")
    assert result.exit_code == 0, result.output
    [line] = read_jsonl(out)
    assert line["response"]["body"]["model"] == "demo"
    by_name = service.cli("run", path, "--model", "demo", "--max-tokens", "24")
    assert by_name.exit_code == 0, by_name.output
