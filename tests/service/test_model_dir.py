"""`--model` as a name under DINFER_BATCH_MODEL_DIR: the job stores the name (not this
machine's path), output lines show it, and a worker resolves it in its own model
directory."""

import json

from tests.service_helpers import read_jsonl, write_jsonl


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


def test_lines_naming_another_model_run_on_the_jobs_and_are_counted(sqlite_service, tmp_path,
                                                                    tiny_checkpoint):
    """OpenAI batch files name a model on every line: such lines run on the job's model
    and the job says so; --strict-model fails them instead, each alone."""
    service = sqlite_service
    service.env["DINFER_BATCH_MODEL_DIR"] = str(tiny_checkpoint.parent)
    tiny = tiny_checkpoint.name

    def openai_line(custom_id, model):
        return {"custom_id": custom_id, "method": "POST", "url": "/v1/completions",
                "body": {"model": model, "prompt": "add 1 2=", "max_tokens": 4}}

    path = write_jsonl(tmp_path / "in.jsonl", [
        openai_line("a", "gpt-4o"), openai_line("b", tiny), openai_line("c", "gpt-4o"),
        openai_line("d", "o3-mini"), {"prompt": "add 2 2=", "custom_id": "e"}])
    common = ["--model", tiny, "--block-length", "4", "--max-tokens", "4"]
    out = tmp_path / "out.jsonl"
    result = service.cli("run", path, "-o", out, *common)
    assert result.exit_code == 0, result.output
    note = f"3 requests named another model (gpt-4o, o3-mini); ran on {tiny}"
    assert note in result.output
    assert [line["error"] for line in read_jsonl(out)] == [None] * 5
    job = json.loads(service.cli("list", "--json").output)
    shown = json.loads(service.cli("status", job["id"], "--json").output)
    assert shown["other_models"] == {"gpt-4o": 2, "o3-mini": 1}
    assert shown["notes"] == [note]
    status = service.cli("status", job["id"])
    assert status.exit_code == 0 and status.output.splitlines()[1] == note

    strict = service.cli("run", path, "-o", out, *common, "--strict-model")
    assert strict.exit_code == 0, strict.output
    errors = {line["custom_id"]: line["error"] for line in read_jsonl(out)}
    assert [custom_id for custom_id, error in errors.items() if error is None] == ["b", "e"]
    assert errors["a"] == {"code": "invalid_request", "message": (
        f"line 1: the body names model 'gpt-4o', but this job runs on '{tiny}' "
        "(--strict-model)")}
    assert errors["d"]["message"].startswith("line 4: the body names model 'o3-mini'")
