"""What a tenant's reads cost and show, through a real `dinfer-batch api` server on SQLite
and PostgreSQL with the official client: a batch object stays small whatever its lines
held; a result file's size is stored when its batch ends (a file object never reads the
file); no client-visible answer names a server path, a URL, a host or a credential (a
blank upload, a model outside the model folder, a broker out of reach); no third-party
script on the dashboard's origin; with auth off only allowed Host names are answered."""

import json

import httpx2 as httpx
import pytest
from sqlalchemy import update

from dinfer_batch.jobs.reading.result_sizes import measure_ended
from dinfer_batch.jobs.reading.results import outputs
from dinfer_batch.jobs.running import chunk_state
from dinfer_batch.redact import mask
from dinfer_batch.statuses import ChunkStatus
from dinfer_batch.storage.tables import Job
from tests.api_helpers import free_port, start_api, stop_api
from tests.service_helpers import write_jsonl

pytestmark = pytest.mark.integration


def upload(client, path):
    return client.files.create(file=path.open("rb"), purpose="batch")


def create(client, file_id, **extra):
    return client.batches.create(input_file_id=file_id, endpoint="/v1/completions",
                                 completion_window="24h", **extra)


def server_paths(api, tmp_path):
    return [str(tmp_path), str(api.service.model), "/tmp/", "/root"]


def test_blank_uploads_are_400_without_a_server_path(api, tmp_path):
    client, http = api.client(), api.http()
    for name, text in (("blank", "\n\n\n"), ("spaces", " \n\t\n  \n"),
                       ("many", "\n" * 12_000)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text(text)
        file = upload(client, path)
        answer = http.post("/v1/batches", json={"input_file_id": file.id,
                                                "endpoint": "/v1/completions",
                                                "completion_window": "24h"})
        message = answer.json()["error"]["message"]
        assert answer.status_code == 400, answer.text
        assert file.id in message and "no requests" in message
        assert not any(p in message for p in server_paths(api, tmp_path)), message
    runs = tmp_path / "runs.jsonl"  # a run of blank lines between two requests
    runs.write_text('{"prompt": "a"}\n' + "\n" * 12_000 + '{"prompt": "b"}\n')
    assert create(client, upload(client, runs).id).request_counts.total == 2


def test_a_batch_object_stays_small_and_shows_no_server_path(api, tmp_path):
    """12 lines naming 1 MB model names (and 3 naming short ones): the object keeps the
    ten names most lines gave, each cut short, and counts the rest."""
    body = {"prompt": "a", "max_tokens": 8, "block_length": 8}
    lines = [{"body": body | {"model": f"{i:02d}" + "m" * 1_000_000},
              "custom_id": f"big-{i}", "method": "POST", "url": "/v1/completions"}
             for i in range(12)]
    lines += [{"model": "small", "prompt": "b", "max_tokens": 8, "block_length": 8}] * 3
    client = api.client()
    batch = create(client, upload(client, write_jsonl(tmp_path / "big.jsonl", lines)).id,
                   metadata={"k": "v"})
    shown = api.http().get(f"/v1/batches/{batch.id}").json()
    assert len(json.dumps(shown)) < 10_000
    assert sum(shown["other_models"].values()) == 15
    assert len(shown["other_models"]) == 11 and shown["other_models"]["small"] == 3
    assert max(len(name) for name in shown["other_models"]) <= 103
    assert shown["other_models"]["(other names)"] == 3
    assert shown["model"] == api.service.model.name  # not its path: it is outside models/
    assert "output_expires_after" not in shown  # not asked for: omitted, as OpenAI does
    listed = api.http().get("/v1/batches").json()["data"]
    assert str(api.service.model) not in json.dumps(listed)


def test_a_result_files_size_is_stored_when_its_batch_ends(api, tmp_path):
    client, sessions = api.client(), api.service.sessions()
    path = write_jsonl(tmp_path / "in.jsonl",
                       [{"prompt": "a", "max_tokens": 8, "block_length": 8}, "not json",
                        {"prompt": "b", "max_tokens": 8, "block_length": 8}])
    batch = create(client, upload(client, path).id,
                   output_expires_after={"anchor": "created_at", "seconds": 3600})
    assert batch.model_extra["output_expires_after"]["seconds"] == 3600
    chunk_state.claim(sessions, batch.id, 0, "w", "cpu", 60)
    chunk_state.record(sessions, batch.id, [chunk_state.Outcome(line=1, text="one"),
                                            chunk_state.Outcome(line=3, text="three")])
    assert chunk_state.finish(sessions, batch.id, 0, ChunkStatus.DONE,
                              chunk_state.ChunkMetrics())  # it ended the batch
    measure_ended(sessions, batch.id)  # as its worker does then, on its writer thread
    ended = client.batches.retrieve(batch.id)
    job = api.service.job(batch.id)
    assert job.output_bytes is not None and job.error_bytes is not None  # at its end
    for file_id in (ended.output_file_id, ended.error_file_id):
        content = client.files.content(file_id).content
        assert client.files.retrieve(file_id).bytes == len(content) > 0
    assert [line["response"]["body"]["model"] for line in outputs(sessions, job)
            if line["response"]] == [api.service.model.name] * 2
    with sessions.begin() as session:  # the file object reads the stored size, not the file
        session.execute(update(Job).where(Job.id == batch.id).values(output_bytes=7))
    assert client.files.retrieve(ended.output_file_id).bytes == 7


def test_a_broker_out_of_reach_is_503_naming_no_url_host_or_password(service, tmp_path):
    broker = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    api = start_api(service, tmp_path, DINFER_BATCH_BROKER_URL=broker)
    try:
        client = api.client()
        file = upload(client, write_jsonl(tmp_path / "in.jsonl", [{"prompt": "a"}]))
        answer = api.http().post("/v1/batches", json={
            "input_file_id": file.id, "endpoint": "/v1/completions",
            "completion_window": "24h"})
        message = answer.json()["error"]["message"]
        assert answer.status_code == 503 and "cannot be reached" in message
        for secret in ("redis://", "127.0.0.1", "hunter2", "6379", broker.split(":")[-1]):
            assert secret not in message, message
    finally:
        stop_api(api)


def test_no_third_party_script_and_hosts_allowed_with_auth_off(sqlite_service, tmp_path):
    api = start_api(sqlite_service, tmp_path, DINFER_BATCH_API_AUTH="off")
    try:
        port = api.url.rsplit(":", 1)[1]
        plain = httpx.Client(base_url=api.url, timeout=30)
        assert plain.get("/docs").status_code == 404
        assert plain.get("/redoc").status_code == 404
        assert plain.get("/openapi.json").json()["info"]["title"] == "dinfer-batch"
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            assert plain.get("/v1/batches", headers={"Host": host}).status_code == 200
        rebound = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
        for method, path in (("GET", "/v1/batches"), ("GET", "/"), ("POST", "/signout")):
            answer = plain.request(method, path, headers=rebound)
            assert answer.status_code == 400, (path, answer.text)
            assert answer.json()["error"]["code"] == "host_not_allowed"
        assert plain.get("/healthz", headers=rebound).status_code == 200
    finally:
        stop_api(api)
    api = start_api(sqlite_service, tmp_path, DINFER_BATCH_API_AUTH="off",
                    DINFER_BATCH_ALLOWED_HOSTS="batch.internal")
    try:
        plain = httpx.Client(base_url=api.url, timeout=30)
        assert plain.get("/v1/batches", headers={"Host": "batch.internal"}).status_code == 200
        assert plain.get("/v1/batches").status_code == 400  # 127.0.0.1 is not listed now
    finally:
        stop_api(api)


@pytest.mark.parametrize(("text", "shown"), [
    ("http://h/hooks?token=abc&v=2", "http://h/hooks?token=***&v=***"),
    ("https://u:pw@h:1/x?flag&sig=s#frag", "https://u:***@h:1/x?flag&sig=***#***"),
    ("see https://example.com/hooks.", "see https://example.com/hooks."),
])
def test_mask_hides_query_secrets(text, shown):
    assert mask(text) == shown


def test_webhooks_list_masks_secrets_in_the_query_string(sqlite_service):
    url = "https://hooks.example.com/in?token=s3cret&team=x"
    assert sqlite_service.cli("webhooks", "add", url).exit_code == 0
    listed = sqlite_service.cli("webhooks", "list", "--json").output
    assert "s3cret" not in listed and "token=***" in listed
