"""Hostile input (#17): everything a client or a file can send is a 4xx naming the field,
or a failed line naming the field while the other lines run; never a 5xx, never exit 1,
nothing stored half-way; and the server still answers /healthz afterwards. Run against a
real server on SQLite and on PostgreSQL, and against `submit`."""

import json
import os
import stat
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from dinfer_batch.api.keys import secret_hash
from dinfer_batch.cli import main
from dinfer_batch.formats.limits import MAX_CUSTOM_ID, MAX_LINE_CHARS
from dinfer_batch.redact import mask
from dinfer_batch.storage.tables import ApiKey, Item
from tests.api_helpers import start_api, stop_api
from tests.service_helpers import wait_for

pytestmark = pytest.mark.integration

OK = {"prompt": "add 1 2=", "max_tokens": 8, "block_length": 8}


def line(**fields):
    return json.dumps(OK | fields).encode()


def openai_line(**body):
    return json.dumps({"custom_id": "o", "method": "POST", "url": "/v1/completions",
                       "body": OK | body}).encode()


# (line bytes, what its error must say): NULs and lone surrogates in every kind of string
# field, invalid UTF-8, huge and deep values, non-finite and out-of-range numbers
HOSTILE_LINES = [
    (line(custom_id="a\u0000b"), "custom_id contains a NUL character"),
    (b'{"custom_id": "\\ud800", "prompt": "x"}', "custom_id is not valid UTF-8"),
    (line(custom_id="\u00e9" * (MAX_CUSTOM_ID + 1)), f"longer than {MAX_CUSTOM_ID} characters"),
    (line(custom_id=["a"]), "custom_id must be a string"),
    (line(prompt="a\u0000b"), "prompt contains a NUL character"),
    (b'{"prompt": "a\\udfff"}', "prompt is not valid UTF-8"),
    (b'{"prompt": "caf\xe9 \xff"}', "prompt is not valid UTF-8"),  # latin-1 bytes
    (openai_line(prompt="x\u0000"), "body.prompt contains a NUL character"),
    (json.dumps({"messages": [{"role": "user", "content": "hi\u0000"}]}).encode(),
     "messages[0].content contains a NUL character"),
    (json.dumps({"messages": [{"role": "u\u0000", "content": "hi"}]}).encode(),
     "messages[0].role contains a NUL character"),
    (line(stop=["ok", "\u0000"]), "stop[1] contains a NUL character"),
    (b'{"prompt": "x", "k\\u0000": 1}', "a key in the line contains a NUL character"),
    (b"[" * 5000 + b"]" * 5000, "nested deeper than 1024 levels"),
    (b'{"prompt": ' + b"[" * 1000 + b"]" * 1000 + b"}", "prompt must be a non-empty string"),
    (b'{"prompt": "x", "temperature": NaN}', "temperature must be a number >= 0, got nan"),
    (b'{"prompt": "x", "temperature": Infinity}', "temperature must be a number >= 0"),
    (b'{"prompt": "x", "top_p": -Infinity}', "top_p must be a number in (0, 1]"),
    (b'{"prompt": "x", "temperature": 1e999}', "temperature must be a number >= 0"),
    (line(seed=2**70), "seed must be an integer"),  # orjson reads it as a float
    (line(seed=-1), "seed must be an integer >= 0"),
    (line(max_tokens=2**64), "max_tokens must be a positive integer"),
    (line(seed=2**63), "seed must be at most 9223372036854775807"),
    (line(top_k=2**63), "top_k must be at most"),
    (line(n=10**30), "n must be a positive integer"),
    (b'{"prompt": "x", "logprobs": 1' + b"0" * 5000 + b"}", "a number is too large to read"),
    (b'{"prompt": "x", "user": NaN, "logprobs": 1' + b"0" * 300 + b"}",
     "top_logprobs must be an integer from 0 to 20, got 1000"),
    (line(prompt="word " * 200_000), "prompt is too long: its 1000000 characters are at least"),
    (b'{"prompt": "' + b"a" * (MAX_LINE_CHARS + 10) + b'"}',
     f"the line is longer than {MAX_LINE_CHARS} characters"),
    (line(prompt=[1.5] * 10), "prompt must be a non-empty string, a list of token ids, or "),
    (line(prompt=[1, 10**6]), "prompt token ids must lie in [0, "),
]


def hostile_file(path):
    """A UTF-8 BOM, one good line, every hostile line, one good line."""
    texts = [b"\xef\xbb\xbf" + line(custom_id="first")]
    texts += [text for text, _ in HOSTILE_LINES] + [line(custom_id="last")]
    path.write_bytes(b"\n".join(texts) + b"\n")
    return path


def check_items(service, job_id):
    with service.sessions()() as session:
        items = {i.line: i for i in session.scalars(select(Item).where(Item.job_id == job_id))}
    assert items[1].custom_id == "first" and items[1].error_message is None  # the BOM
    last = len(HOSTILE_LINES) + 2
    assert items[last].custom_id == "last" and items[last].error_message is None
    for number, (_, message) in enumerate(HOSTILE_LINES, start=2):
        error = items[number].error_message
        assert error and error.startswith(f"line {number}: ") and message in error, (
            number, message, error)
        assert len(error) < 1000  # no value is echoed whole


def test_hostile_lines_fail_alone_through_submit(service, tmp_path):
    path = hostile_file(tmp_path / "hostile.jsonl")
    result = service.cli("submit", path)
    assert result.exit_code == 0, result.output
    check_items(service, result.stdout.strip())


def test_hostile_lines_fail_alone_through_the_api(api, tmp_path):
    client = api.client()
    path = hostile_file(tmp_path / "hostile.jsonl")
    file = client.files.create(file=path.open("rb"), purpose="batch")
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/completions",
                                  completion_window="24h")
    assert batch.request_counts.total == len(HOSTILE_LINES) + 2
    assert batch.request_counts.failed == len(HOSTILE_LINES)
    check_items(api.service, batch.id)
    assert api.http(None).get("/healthz").status_code == 200


def raw_json(http, path, body: bytes):
    return http.post(path, content=body, headers={"Content-Type": "application/json"})


def test_hostile_requests_are_4xx_naming_the_field(api, tmp_path):
    http = api.http()
    good = tmp_path / "good.jsonl"
    good.write_bytes(line() + b"\n")
    file_id = http.post("/v1/files", files={"file": ("good.jsonl", good.read_bytes())},
                        data={"purpose": "batch"}).json()["id"]
    base = {"input_file_id": file_id, "endpoint": "/v1/completions", "completion_window": "24h"}

    def batch(**fields):
        return http.post("/v1/batches", json=base | fields)

    def batch_raw(extra: bytes):
        return raw_json(http, "/v1/batches", json.dumps(base).encode()[:-1] + b", " + extra
                        + b"}")

    def upload(filename: bytes, content=b'{"prompt": "x"}\n'):
        boundary = b"hostile"
        body = (b"--" + boundary + b'\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n'
                b"batch\r\n--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; '
                b'filename="' + filename + b'"\r\nContent-Type: application/jsonl\r\n\r\n'
                + content + b"\r\n--" + boundary + b"--\r\n")
        return http.post("/v1/files", content=body,
                         headers={"Content-Type": "multipart/form-data; boundary=hostile"})

    cases = [
        (batch(metadata={f"k{i}": "v" for i in range(17)}), "metadata"),
        (batch(metadata={"k" * 65: "v"}), "metadata key is longer than 64"),
        (batch(metadata={"k": "v" * 513}), "is longer than 512"),
        (batch(metadata={"k": "a\u0000"}), "contains a NUL"),
        (batch_raw(b'"metadata": {"k": "\\ud800"}'), "metadata"),
        (batch(completion_window="24h\n"), "completion_window"),
        (batch(completion_window="99999999999999999999d"), "completion_window"),
        (batch_raw(b'"temperature": NaN'), "temperature"),
        (batch_raw(b'"temperature": Infinity'), "temperature"),
        (batch(seed=2**70), "seed must be at most"),
        (batch(stop=["a\u0000"]), "stop[0] contains a NUL"),
        (batch_raw(b'"stop": ["\\udc80"]'), "stop[0] is not valid UTF-8"),
        (batch(input_file_id="file-\u0000"), "input_file_id"),
        (batch(model="m" * 10_000), "model"),
        (batch(model="demo\u0000"), "model"),
        (batch(**{"x" * 10_000: 1}), "unknown parameter"),
        (batch_raw(b'"deep": ' + b"[" * 100_000 + b"]" * 100_000), None),
        (raw_json(http, "/v1/batches", b'{"a": "' + b"x" * (2 << 20) + b'"}'), None),
        (http.get("/v1/files/file-%00"), None),
        (http.get("/v1/batches", params={"after": "a\u0000"}), None),
        (http.get("/v1/batches", params={"after": "x" * 10_000}), "after"),
        (http.get("/v1/files/" + "x" * 5000), None),
        (upload(b"a\x00b.jsonl"), None),
        (upload(b"a\x1b[31m.jsonl"), "filename contains"),
        (upload(b"n" * 300 + b".jsonl"), "filename is longer than 255"),
    ]
    for number, (response, message) in enumerate(cases):
        assert 400 <= response.status_code < 500, (number, response.status_code,
                                                     response.text[:300])
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        if message:
            assert message in error["message"] or message == error["param"], (number, error)
    assert cases[17][0].status_code == 413  # a body over 1 MB: refused while it streams
    assert sorted(p.name for p in (tmp_path / "files").iterdir()) == [file_id]
    assert http.get("/healthz").status_code == 200


def test_unauthenticated_and_oversized_bodies_are_cut_off_early(sqlite_service, tmp_path):
    api = start_api(sqlite_service, tmp_path, DINFER_BATCH_MAX_FILE_BYTES="100000")
    try:
        stranger = api.http(None)

        def chunks(total):
            for _ in range(total // 65536):
                yield b"x" * 65536

        for path in ("/v1/files", "/v1/batches"):  # 401 before the body is read
            refused = stranger.post(path, content=chunks(8 << 20),
                                    headers={"Content-Type": "application/json"})
            assert refused.status_code == 401, refused.text
        # with a key, a chunked upload (no Content-Length) stops at the limit
        boundary = "b"
        head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n"
                f"batch\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
                f"filename=\"big.jsonl\"\r\n\r\n").encode()

        def multipart():
            yield head
            yield from chunks(4 << 20)

        big = api.http().post("/v1/files", content=multipart(), headers={
            "Content-Type": f"multipart/form-data; boundary={boundary}"})
        assert big.status_code == 413 and big.json()["error"]["code"] == "file_too_large"
        assert list((tmp_path / "files").glob("*")) == []
        assert stranger.get("/healthz").status_code == 200
        assert stranger.get("/metrics").status_code == 401
        # a key of the reserved owner `local`, made before it was reserved, opens nothing
        with sqlite_service.sessions().begin() as session:
            session.add(ApiKey(name="old-local", owner="local", admin=False, created_at=0.0,
                               secret_hash=secret_hash("sk-old-local")))
        old = stranger.get("/v1/batches", headers={"Authorization": "Bearer sk-old-local"})
        assert old.status_code == 401
    finally:
        stop_api(api)


def test_cli_refuses_hostile_options_with_exit_2_and_saves_nothing(sqlite_service, tmp_path):
    service = sqlite_service
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(line() + b"\n")
    vars_file = tmp_path / "v.jsonl"
    vars_file.write_text('{"task": "x", "w": 200000000}\n')
    refused = [
        ("schedule", "add", "s", "--every", "99999999999999999999d", prompts),
        ("schedule", "add", "s", "--every", "400d", prompts),
        ("schedule", "add", "s", "--every", "1s", prompts),
        ("schedule", "add", "s", "--cron", "0 0 31 2 *", prompts),
        ("schedule", "add", "s", "--cron", "0 0 30 2 *", prompts),
        ("submit", prompts, "--temperature", "nan"),
        ("submit", prompts, "--temperature", "inf"),
        ("submit", prompts, "--seed", str(2**70)),
        ("submit", prompts, "--seed-base", str(2**70)),
        ("submit", prompts, *sum((("--metadata", f"k{i}=v") for i in range(17)), ())),
        ("submit", prompts, "--metadata", "k" * 65 + "=v"),
        ("submit", prompts, "--metadata", "k=" + "v" * 513),
        ("submit", "--template", "{task:>{w}}", "--vars", vars_file),
        ("submit", "--template", "{task:{task.__class__.__mro__}}", "--vars", vars_file),
        ("submit", "--template", "{task.upper}", "--vars", vars_file),
        ("submit", "--template", "{task:>200000000}", "--vars", vars_file),
        ("submit", "--template", "{task!z}", "--vars", vars_file),
        ("keys", "create", "local"),
        ("keys", "create", "k", "--owner", "local"),
        ("keys", "create", "k", "--owner", "o" * 201),
    ]
    for args in refused:
        result = service.cli(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output
    # a credential in a URL never reaches the terminal
    for name, url in (("DINFER_BATCH_DATABASE_URL", "postgresql+psycopg://u:s3cret@127.0.0.1:1/x"),
                      ("DINFER_BATCH_BROKER_URL", "redis://:s3cret@127.0.0.1:1/0")):
        shown = subprocess.run([sys.executable, "-m", "dinfer_batch", "submit", str(prompts)],
                               env=os.environ | service.env | {name: url},
                               capture_output=True, text=True, timeout=120)
        assert shown.returncode == 2 and "s3cret" not in shown.stderr + shown.stdout
        assert url.replace("s3cret", "***") in shown.stderr, shown.stderr
    assert service.cli("schedule", "list", "--json").output == ""
    assert service.cli("list").exit_code == 0
    with service.sessions()() as session:
        assert session.scalars(select(Item)).first() is None
    # a template that renders too large fails its line, the rest runs
    vars_file.write_text('{"task": "' + "x" * (1 << 20) + '"}\n{"task": "y"}\n')
    result = service.cli("submit", "--template", "{task}" * 5, "--vars", vars_file,
                         "--max-tokens", "8", "--block-length", "8")
    assert result.exit_code == 0, result.output
    with service.sessions()() as session:
        errors = [i.error_message for i in session.scalars(select(Item).order_by(Item.line))]
    assert errors[0] == (f"line 1: cannot render the template: the rendered prompt is longer "
                         f"than {MAX_LINE_CHARS} characters") and errors[1] is None


def test_files_and_database_are_owner_only_and_orphans_are_removed(sqlite_service, tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    old, young = files / "file-killed", files / "file-inflight"
    old.write_bytes(b"partial")
    young.write_bytes(b"partial")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    api = start_api(sqlite_service, tmp_path)
    try:
        assert not old.exists() and young.exists()
        upload = tmp_path / "u.jsonl"
        upload.write_bytes(line() + b"\n")
        file_id = api.client().files.create(file=upload.open("rb"), purpose="batch").id
        assert stat.S_IMODE((files / file_id).stat().st_mode) == 0o600
    finally:
        stop_api(api)
    database = tmp_path / "fresh" / "x.db"
    env = sqlite_service.env | {"DINFER_BATCH_DATABASE_URL": f"sqlite:///{database}"}
    assert CliRunner().invoke(main, ["list"], env=env).exit_code == 0
    assert stat.S_IMODE(database.stat().st_mode) == 0o600


def test_a_database_outage_is_503_and_not_ready_never_500(private_postgres,
                                                          private_postgres_service, tmp_path):
    api = start_api(private_postgres_service, tmp_path)
    try:
        http = api.http()
        assert http.get("/v1/batches").status_code == 200
        private_postgres.stop()
        for response in (http.get("/v1/batches"), http.get("/v1/files/file-x"),
                         api.http("admin").get("/metrics")):
            assert response.status_code == 503, response.text
            assert "cannot be reached" in response.json()["error"]["message"]

        def not_ready():
            ready = http.get("/readyz")
            return (ready.status_code == 503
                    and ready.json()["error"]["message"] == "not ready: database unreachable")

        wait_for(not_ready, 30)
        assert http.get("/healthz").status_code == 200
        private_postgres.start()
        wait_for(lambda: http.get("/readyz").status_code == 200, 60)
        assert http.get("/v1/batches").status_code == 200
    finally:
        stop_api(api)


@pytest.mark.parametrize(("text", "shown"), [
    ("cannot reach redis://:pw@h:6379/0 now", "cannot reach redis://:***@h:6379/0 now"),
    ("redis://:p@ss:w@h/0", "redis://:***@h/0"),  # an unescaped @ in the secret
    ("postgresql+psycopg://bob:pw@db:5432/x", "postgresql+psycopg://bob:***@db:5432/x"),
    ("postgresql://bob@db/x", "postgresql://bob@db/x"),  # a user name is no secret
    ("sqlite:////tmp/a@b.db and mail a@b.c", "sqlite:////tmp/a@b.db and mail a@b.c"),
])
def test_mask_hides_every_secret_of_a_url_and_nothing_else(text, shown):
    assert mask(text) == shown


def test_a_spent_connection_budget_is_503_not_500():
    """A request that waits DbPool.timeout for one of the process's connections
    (DINFER_BATCH_DB_POOL_SIZE) gets the database's 503, as an outage does."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    from dinfer_batch.api.errors import install
    from tests.service_helpers import env_settings

    app = FastAPI()
    app.state.settings = env_settings()
    install(app)

    @app.get("/busy")
    def busy() -> None:
        raise PoolTimeout("QueuePool limit of size 2 overflow 0 reached")

    response = TestClient(app, raise_server_exceptions=False).get("/busy")
    assert response.status_code == 503, response.text
    assert response.json()["error"]["message"] == (
        "the database cannot be reached; try again later")
