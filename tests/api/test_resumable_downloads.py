"""Result downloads that resume, on SQLite and PostgreSQL, against a real server and
worker: HEAD, Range (206, 416, ignored multi-range), ETag and If-Range on the API's result
files and the dashboard's downloads; a download cut again and again resumed to the same
bytes as one clean download; `dinfer-batch results -o FILE` resuming a partial FILE; and a
read cut by a purge raising instead of ending cleanly on part of the file."""

import random

import httpx2 as httpx
import pytest

from dinfer_batch.cli.resume import partial_path
from dinfer_batch.dashboard.access import COOKIE
from dinfer_batch.jobs.reading.result_pages import file_bytes, file_index
from dinfer_batch.jobs.reading.results import ResultsChanged, output_texts
from dinfer_batch.jobs.retention import purge
from tests.api.test_api_batches import wait_batch
from tests.service_helpers import write_jsonl

pytestmark = pytest.mark.integration

LINES = 6_000  # two pages of results.PAGE lines


def make_batch(api, tmp_path):
    api.service.start_worker(tmp_path / "worker.log",
                             DINFER_BATCH_ENGINE="tests.stand_in_engines:InstantEngine")
    client = api.client()
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"messages": [{"role": "user", "content": f"question {i}"}],
                       "max_tokens": 8}} for i in range(LINES)]
    for i in range(0, LINES, 97):  # failed lines all through the file
        lines[i]["body"]["temperature"] = -1
    uploaded = client.files.create(file=write_jsonl(tmp_path / "in.jsonl", lines).open("rb"),
                                   purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id,
                                  endpoint="/v1/chat/completions", completion_window="24h",
                                  extra_body={"chunk_size": 256, "block_length": 8})
    batch = wait_batch(client, batch.id, timeout=300)
    assert batch.status == "completed" and batch.error_file_id is not None
    return batch


def cut_download(http, url, size, etag, rng):
    """Download `url` in pieces, each connection dropped after a random number of bytes
    and the next resumed with Range and If-Range, as a download manager does."""
    got = bytearray()
    drops = 0
    while len(got) < size:
        headers = {"Range": f"bytes={len(got)}-", "If-Range": etag} if got else {}
        limit = rng.randrange(1, max(2, size // 4))
        with http.stream("GET", url, headers=headers) as response:
            assert response.status_code == (206 if got else 200)
            if got:
                assert response.headers["content-range"] == f"bytes {len(got)}-{size - 1}/{size}"
            taken = 0
            for chunk in response.iter_raw(8192):
                got += chunk
                taken += len(chunk)
                if taken >= limit and len(got) < size:
                    drops += 1
                    break  # the connection is closed mid-body
    return bytes(got), drops


def test_result_downloads_resume_to_the_same_bytes(api, tmp_path):
    batch = make_batch(api, tmp_path)
    client, http = api.client(), api.http()
    output_url = f"/v1/files/{batch.output_file_id}/content"
    clean = client.files.content(batch.output_file_id).read()
    errors = client.files.content(batch.error_file_id).read()
    assert len(clean.splitlines()) + len(errors.splitlines()) == LINES
    assert len(errors.splitlines()) == len(range(0, LINES, 97))
    assert client.files.retrieve(batch.output_file_id).bytes == len(clean)

    head = http.head(output_url)
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["content-length"]) == len(clean)
    assert head.headers["accept-ranges"] == "bytes"
    etag = head.headers["etag"]
    assert http.get(output_url).headers["etag"] == etag  # the same content, the same tag
    error_head = http.head(f"/v1/files/{batch.error_file_id}/content")
    assert int(error_head.headers["content-length"]) == len(errors)
    assert error_head.headers["etag"] != etag

    size = len(clean)
    part = http.get(output_url, headers={"Range": "bytes=100-199"})
    assert (part.status_code, part.content) == (206, clean[100:200])
    assert part.headers["content-range"] == f"bytes 100-199/{size}"
    assert part.headers["content-length"] == "100"
    tail = http.get(output_url, headers={"Range": "bytes=-7"})
    assert (tail.status_code, tail.content) == (206, clean[-7:])
    url = api.service.env["DINFER_BATCH_DATABASE_URL"]
    job = api.service.job(batch.id)
    boundary = file_index(url, job, "output").sizes[0]  # where the second page starts
    assert 0 < boundary < size
    across = http.get(output_url, headers={"Range": f"bytes={boundary - 5}-{boundary + 4}"})
    assert across.content == clean[boundary - 5:boundary + 5]
    outside = http.get(output_url, headers={"Range": f"bytes={size}-"})
    assert outside.status_code == 416 and outside.headers["content-range"] == f"bytes */{size}"
    several = http.get(output_url, headers={"Range": "bytes=0-1,5-6"})
    assert (several.status_code, several.content) == (200, clean)  # served whole
    stale = http.get(output_url, headers={"Range": "bytes=10-", "If-Range": '"other"'})
    assert (stale.status_code, stale.content) == (200, clean)
    ranged_head = http.head(output_url, headers={"Range": "bytes=10-19"})
    assert ranged_head.status_code == 206 and ranged_head.headers["content-length"] == "10"

    rng = random.Random(31)
    resumed, drops = cut_download(http, output_url, size, etag, rng)
    assert drops >= 3 and resumed == clean
    resumed_errors, _ = cut_download(http, f"/v1/files/{batch.error_file_id}/content",
                                     len(errors), error_head.headers["etag"], rng)
    assert resumed_errors == errors

    dashboard = httpx.Client(base_url=api.url, cookies={COOKIE: api.keys["alice"]},
                             timeout=60)
    page = f"/jobs/{batch.id}/files/output"
    assert dashboard.head(page).headers["etag"] == etag
    assert dashboard.get(page).content == clean
    assert dashboard.get(page, headers={"Range": "bytes=5-"}).content == clean[5:]

    # the command line: whole, then resuming partial files cut at any byte
    out, err = tmp_path / "out.jsonl", tmp_path / "err.jsonl"
    done = api.service.cli("results", batch.id, "-o", out, "--errors", err)
    assert done.exit_code == 0, done.output
    assert (out.read_bytes(), err.read_bytes()) == (clean, errors)
    every = tmp_path / "all.jsonl"
    assert api.service.cli("results", batch.id, "-o", every).exit_code == 0
    whole = every.read_bytes()
    assert sorted(whole.splitlines()) == sorted(clean.splitlines() + errors.splitlines())
    for cut in (1, boundary, size // 2, len(whole) - 1):
        every.unlink()
        partial_path(every, job).write_bytes(whole[:cut])
        again = api.service.cli("results", batch.id, "-o", every)
        assert again.exit_code == 0, again.output
        assert f"from byte {cut}" in again.output
        assert every.read_bytes() == whole and not partial_path(every, job).exists()
    corrupt = bytearray(whole[:size // 2])
    corrupt[10] ^= 1  # a partial whose bytes are not the results': written again
    partial_path(every, job).write_bytes(bytes(corrupt))
    again = api.service.cli("results", batch.id, "-o", every)
    assert again.exit_code == 0 and "writing it again" in again.output
    assert every.read_bytes() == whole

    # a purge while the results are read: an error, never a clean end on part of them
    index = file_index(url, job, "output")
    reading = file_bytes(url, job, index)
    first = next(reading)
    assert clean.startswith(first) and len(first) < size
    texts = output_texts(url, job)
    next(texts)
    assert purge(api.service.sessions(), batch.id) > 0
    with pytest.raises(ResultsChanged, match="deleted while they were read"):
        list(reading)
    with pytest.raises(ResultsChanged, match="deleted while they were read"):
        list(texts)
    assert http.head(output_url).status_code == 404
    gone = api.service.cli("results", batch.id, "-o", tmp_path / "late.jsonl")
    assert gone.exit_code == 2 and not (tmp_path / "late.jsonl").exists()

