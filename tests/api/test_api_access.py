"""API keys and owners, errors in OpenAI's shape, upload limits, health and metrics, on a
real server (no worker: nothing here needs a batch to run)."""

import json

import openai
import pytest

from tests.api_helpers import start_api, stop_api
from tests.service_helpers import write_jsonl

pytestmark = pytest.mark.integration


def upload(api, owner, tmp_path, lines=3):
    path = write_jsonl(tmp_path / f"{owner}.jsonl", [
        {"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
         "body": {"prompt": "add 1 2=", "max_tokens": 8, "block_length": 8}}
        for i in range(lines)])
    return api.client(owner).files.create(file=path.open("rb"), purpose="batch")


def test_keys_and_owners(sqlite_api, tmp_path):
    api = sqlite_api
    alice, bob = api.client("alice"), api.client("bob")
    file = upload(api, "alice", tmp_path)
    batch = alice.batches.create(input_file_id=file.id, endpoint="/v1/completions",
                                 completion_window="24h")
    alice.batches.cancel(batch.id)

    # no key, a wrong key, a revoked key: 401 in OpenAI's shape
    assert api.http(None).get("/v1/files").json()["error"]["code"] == "missing_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{api.url}/v1", api_key="sk-wrong", max_retries=0).files.list()
    basic = api.http(None).get("/v1/files", headers={"Authorization": "Basic YTpi"})
    assert basic.status_code == 401
    bob_key = f"bob-{api.url.rsplit(':', 1)[1]}"
    assert api.service.cli("keys", "revoke", bob_key).exit_code == 0
    with pytest.raises(openai.AuthenticationError) as revoked:
        bob.batches.list()
    assert revoked.value.status_code == 401
    assert revoked.value.body == {"message": "invalid or revoked API key",
                                  "type": "authentication_error", "param": None,
                                  "code": "invalid_api_key"}
    listed = api.service.cli("keys", "list")
    assert listed.exit_code == 0 and bob_key in listed.output and "alice" in listed.output
    admin_row = next(line for line in listed.output.splitlines() if line.startswith("admin-"))
    assert admin_row.split()[1:3] == ["admin", "yes"]
    assert api.service.cli("keys", "revoke", bob_key).exit_code == 2  # already revoked

    # another owner's objects answer 404 and are not listed
    created = api.service.cli("keys", "create", "carol-key", "--owner", "carol")
    api.keys["carol"] = created.output.strip()
    carol = api.client("carol")
    for call in (lambda: carol.files.retrieve(file.id),
                 lambda: carol.files.content(file.id),
                 lambda: carol.files.delete(file.id),
                 lambda: carol.files.content(batch.id.replace("batch_", "file-") + "-errors"),
                 lambda: carol.batches.retrieve(batch.id),
                 lambda: carol.batches.cancel(batch.id),
                 lambda: carol.batches.create(input_file_id=file.id,
                                              endpoint="/v1/completions",
                                              completion_window="24h")):
        with pytest.raises(openai.NotFoundError):
            call()
    assert list(carol.files.list()) == [] and list(carol.batches.list()) == []
    assert [f.id for f in alice.files.list()] == [file.id]
    assert alice.files.content(alice.batches.retrieve(batch.id).error_file_id).text

    # the CLI still sees every job; its own jobs belong to `local`
    assert batch.id in api.service.cli("list").output


def test_client_errors_are_4xx_in_openai_shape(sqlite_api, tmp_path):
    http = sqlite_api.http()
    file = upload(sqlite_api, "alice", tmp_path)
    cases = [
        (http.post("/v1/batches", json={"endpoint": "/v1/completions",
                                        "completion_window": "24h"}), 400, "input_file_id"),
        (http.post("/v1/batches", json={"input_file_id": file.id, "endpoint": "/v1/embeddings",
                                        "completion_window": "24h"}), 400, "endpoint"),
        (http.post("/v1/batches", json={"input_file_id": file.id,
                                        "endpoint": "/v1/completions",
                                        "completion_window": "soon"}), 400, None),
        (http.post("/v1/batches", json={"input_file_id": file.id,
                                        "endpoint": "/v1/completions",
                                        "completion_window": "24h", "model": "/etc"}),
         400, "model"),
        (http.post("/v1/batches", json={"input_file_id": file.id,
                                        "endpoint": "/v1/completions",
                                        "completion_window": "24h", "decoder": "magic"}),
         400, None),
        (http.post("/v1/batches", content=b"{not json"), 400, None),
        (http.post("/v1/files", files={"file": ("a.jsonl", b"{}\n")},
                   data={"purpose": "fine-tune"}), 400, "purpose"),
        (http.post("/v1/files", files={"file": ("a.jsonl", b"")}, data={"purpose": "batch"}),
         400, "file"),
        (http.get("/v1/batches", params={"limit": 0}), 400, "limit"),
        (http.get("/v1/batches", params={"after": "batch_nope"}), 400, "after"),
        (http.get("/v1/files/file-nope"), 404, "file_id"),
        (http.get("/v1/batches/batch_nope"), 404, "batch_id"),
        (http.get("/v1/nothing"), 404, None),
        (http.put("/v1/files"), 405, None),
    ]
    for response, status, param in cases:
        assert response.status_code == status, (response.request.url, response.text)
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]
        assert error["param"] == param, error
    assert "completion_window must look like 24h" in cases[2][0].json()["error"]["message"]
    assert "decoder must be one of fixed, threshold" in cases[4][0].json()["error"]["message"]


def test_upload_limit_and_operations_endpoints(sqlite_service, tmp_path):
    api = start_api(sqlite_service, tmp_path, DINFER_BATCH_MAX_FILE_BYTES="1000")
    try:
        http = api.http()
        big = b"".join(json.dumps({"prompt": f"add {i} 1="}).encode() + b"\n"
                       for i in range(100))
        declared = http.post("/v1/files", files={"file": ("big.jsonl", big * 100)},
                             data={"purpose": "batch"})
        counted = http.post("/v1/files", files={"file": ("big.jsonl", big)},
                            data={"purpose": "batch"})
        for response in (declared, counted):
            assert response.status_code == 413, response.text
            assert response.json()["error"]["code"] == "file_too_large"
        assert list((tmp_path / "files").iterdir()) == []  # nothing left behind
        assert http.post("/v1/files", files={"file": ("ok.jsonl", big[:900])},
                         data={"purpose": "batch"}).status_code == 200

        assert http.get("/healthz").json() == {"status": "ok"}
        assert http.get("/readyz").json() == {"status": "ready"}
        assert api.http(None).get("/openapi.json").json()["paths"]["/v1/batches"]
        # metrics are fleet-wide: an admin key's, not an owner's
        assert http.get("/metrics").json()["error"]["code"] == "admin_key_required"
        assert api.http(None).get("/metrics").status_code == 401
        metrics = api.http("admin").get("/metrics")
        assert metrics.status_code == 200
        assert 'dinfer_batch_jobs{status="completed"} 0.0' in metrics.text
        assert "dinfer_batch_live_workers" in metrics.text
    finally:
        stop_api(api)
    path = write_jsonl(tmp_path / "cli.jsonl", [{"prompt": "add 1 2="}])
    submitted = sqlite_service.cli("submit", path, "--max-tokens", "8", "--block-length", "8")
    assert submitted.exit_code == 0, submitted.output
    # no auth (local experiments): every caller is `local`, the owner of the CLI's jobs;
    # and a broker that cannot be reached makes the server not ready
    local = start_api(sqlite_service, tmp_path, DINFER_BATCH_API_AUTH="off",
                      DINFER_BATCH_BROKER_URL="redis://:s3cret@127.0.0.1:1/0")
    try:
        http = local.http(None)
        assert [b["id"] for b in http.get("/v1/batches").json()["data"]] == [
            submitted.stdout.strip()]
        assert "DINFER_BATCH_API_AUTH=off" in local.log.read_text()
        ready = http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["error"]["message"] == "not ready: broker unreachable"
        file_id = http.post("/v1/files", files={"file": ("a.jsonl", path.read_bytes())},
                            data={"purpose": "batch"}).json()["id"]
        created = http.post("/v1/batches", json={"input_file_id": file_id,
                                                 "endpoint": "/v1/completions",
                                                 "completion_window": "24h"})
        assert created.status_code == 503, created.text
        assert "s3cret" not in created.text and "127.0.0.1" not in created.text  # (ADR 018)
        assert "the job queue (broker) cannot be reached" in created.text
        assert http.get("/healthz").status_code == 200
    finally:
        stop_api(local)
    assert "s3cret" not in local.log.read_text()  # the log masks it too
