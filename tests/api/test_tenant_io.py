"""What one owner's uploads and reads cost the API (#35), on SQLite and PostgreSQL,
against a real server and worker: a small Parquet file whose rows decode to hundreds of
MB (a dictionary-encoded zstd column) is read a byte budget at a time, its rows over
the line limit and its metadata columns past batch metadata's bounds failing alone with
their line, column and bound, while another owner's listing keeps its latency; result
pages are bounded by bytes, so a suffix read of a large output costs a page, not the
file; If-None-Match answers 304 and no Range header is a 5xx."""

import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from dinfer_batch.jobs.reading.results import PAGE_BYTES
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import ResultPage
from tests.api.test_api_batches import wait_batch

pytestmark = pytest.mark.integration

MB = 1 << 20
# what ingest may add to the API's peak RSS: a few batches of parquet_input.BATCH_BYTES
# (16 MB) decoded rows, their JSON texts and requests (docs/service.md)
INGEST_RSS_BOUND = 400 * MB
# what 8 concurrent suffix reads may add: 8 pages of results.PAGE_BYTES, three files each
READS_RSS_BOUND = 300 * MB


def rss(api, field="VmHWM"):
    """The API process's peak (VmHWM, since peak_reset) or current (VmRSS) resident
    memory, in bytes."""
    for line in Path(f"/proc/{api.process.pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for the API process")


def peak_reset(api):
    """Start the API process's VmHWM again from its current RSS."""
    Path(f"/proc/{api.process.pid}/clear_refs").write_text("5")
    return rss(api, "VmRSS")


def chat_table(texts, ids, extra=None):
    """A chat table, one user message per row; `extra` columns become metadata. Written
    with pyarrow's defaults, a column repeating one long text is dictionary-encoded: a
    few KB however many rows repeat it."""
    return pa.table({"messages": [[{"role": "user", "content": text}] for text in texts],
                     "custom_id": ids, **(extra or {})})


def upload(client, path):
    with path.open("rb") as handle:
        return client.files.create(file=handle, purpose="batch").id


def create(client, file_id):
    return client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                                 completion_window="24h")


def error_lines(client, batch):
    text = client.files.content(batch.error_file_id).read().decode()
    return {line["custom_id"]: line["error"]["message"]
            for line in map(json.loads, text.splitlines())}


def listing_latency(http, stop=None, count=6):
    """Seconds of `GET /v1/batches`: `count` of them, or every one until `stop` is set."""
    seconds = []
    while (stop is None and len(seconds) < count) or (stop is not None and not stop.is_set()):
        started = time.perf_counter()
        assert http.get("/v1/batches", params={"limit": 20}).status_code == 200
        seconds.append(time.perf_counter() - started)
        time.sleep(0.05)
    return seconds


def test_a_hostile_parquet_costs_the_api_a_bounded_memory(api, tmp_path):
    mallory = api.client("bob")
    # 3,000 rows x 150,000 characters: 450 MB decoded from a file of a few KB, more than
    # the 200 MB upload limit: refused once what was read passes it
    path = tmp_path / "hostile.parquet"
    pq.write_table(chat_table(["ab" * 75_000] * 3000, [f"m{i}" for i in range(3000)]), path,
                   compression="zstd")
    assert path.stat().st_size < 64 * 1024
    hostile_id = upload(mallory, path)
    with api.http("alice") as http:
        idle = statistics.median(listing_latency(http))
        before = peak_reset(api)
        stop, during = threading.Event(), []
        reader = threading.Thread(target=lambda: during.extend(listing_latency(http, stop)))
        reader.start()
        try:
            with pytest.raises(openai.BadRequestError) as refused:
                create(mallory, hostile_id)
        finally:
            stop.set()
            reader.join()
    grown = rss(api) - before
    assert "rows decode to more than 200,000,000 characters" in str(refused.value)
    assert grown < INGEST_RSS_BOUND, f"the API grew {grown / MB:.0f} MB ingesting the file"
    # another owner's listing kept its latency while the file was read (slack for a
    # loaded machine's scheduling)
    assert statistics.median(during) <= 2 * idle + 0.1, (idle, during)
    assert mallory.batches.list().data == []  # nothing left behind


def test_rows_over_the_bounds_fail_alone_with_their_column_and_bound(api, tmp_path):
    api.service.start_worker(tmp_path / "worker.log",
                             DINFER_BATCH_ENGINE="tests.stand_in_engines:InstantEngine")
    alice = api.client()
    rows = 40
    texts = ["ab" * 75_000] * rows + ["add 2 2="]  # long rows: too long for the context
    notes = ["n" * 700 if i == 5 else None for i in range(rows)] + ["kept"]  # > 512
    many = {f"c{k}": ["v" if i == 7 else None for i in range(rows + 1)] for k in range(17)}
    path = tmp_path / "rows.parquet"
    pq.write_table(chat_table(texts, [f"m{i}" for i in range(rows)] + ["fine"],
                              {"notes": notes, **many}), path, compression="zstd")
    huge = tmp_path / "huge.parquet"  # one value over the line limit
    pq.write_table(chat_table(["z" * (5 * MB), "add 1 1="], [None, "ok"]), huge,
                   compression="zstd", use_dictionary=False)
    batch = wait_batch(alice, create(alice, upload(alice, path)).id, timeout=300)
    assert batch.request_counts.total == rows + 1
    assert batch.request_counts.completed == 1  # the row with small values ran
    errors = error_lines(alice, batch)
    assert errors["m5"] == ("line 6: column 'notes' holds 700 characters; a column kept as "
                            "metadata holds at most 512")
    assert errors["m7"].startswith("line 8: the row has 17 other columns kept as metadata")
    assert errors["m7"].endswith("at most 16")
    assert "prompt is too long" in errors["m0"]
    output = alice.files.content(batch.output_file_id).read().decode()
    assert '"metadata":{"notes":"kept"}' in output

    huge_batch = wait_batch(alice, create(alice, upload(alice, huge)).id)
    assert huge_batch.request_counts.completed == 1
    refused = error_lines(alice, huge_batch)["line-1"]
    assert refused.startswith("line 1: column 'messages' decodes to about 5,242,")
    assert refused.endswith(f"; a row is at most {4 * MB:,} characters (the line limit)")


def test_a_suffix_read_costs_a_page_and_bad_headers_never_a_5xx(api, tmp_path):
    api.service.start_worker(tmp_path / "worker.log",
                             DINFER_BATCH_ENGINE="tests.stand_in_engines:InstantEngine")
    client = api.client()
    rows = 5000  # one page of results.PAGE lines: 40 MB of output with its metadata
    extra = {f"meta_{k}": [f"{k}{i}".ljust(500, "x") for i in range(rows)] for k in range(16)}
    path = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"prompt": [f"add {i} 1=" for i in range(rows)], **extra}), path)
    with path.open("rb") as handle:
        file_id = client.files.create(file=handle, purpose="batch").id
    batch = client.batches.create(input_file_id=file_id, endpoint="/v1/completions",
                                  completion_window="24h")
    batch = wait_batch(client, batch.id, timeout=300)
    assert batch.status == "completed" and batch.request_counts.completed == rows
    url = f"/v1/files/{batch.output_file_id}/content"
    with api.http() as http:
        whole = http.get(url)
        size, etag = len(whole.content), whole.headers["etag"]
        assert size > 30 * MB and int(whole.headers["content-length"]) == size

        with db.sessions(api.service.env["DINFER_BATCH_DATABASE_URL"])() as session:
            pages = session.execute(select(ResultPage.all_bytes).where(
                ResultPage.job_id == batch.id)).scalars().all()
        line = max(len(text) for text in whole.content.splitlines()) + 1
        assert len(pages) > 1 and max(pages) <= 1.25 * PAGE_BYTES + line, pages

        before = peak_reset(api)
        with ThreadPoolExecutor(8) as pool:
            tails = list(pool.map(lambda _: http.get(url, headers={"Range": "bytes=-10"}),
                                  range(8)))
        grown = rss(api) - before
        assert all(t.status_code == 206 and t.content == whole.content[-10:] for t in tails)
        assert grown < READS_RSS_BOUND, f"8 suffix reads grew the API {grown / MB:.0f} MB"

        for tag in (etag, f"W/{etag}", f'"other", {etag}', "*"):
            cached = http.get(url, headers={"If-None-Match": tag})
            assert cached.status_code == 304 and cached.content == b"", tag
            assert cached.headers["etag"] == etag
        assert http.head(url, headers={"If-None-Match": etag}).status_code == 304
        assert http.get(url, headers={"If-None-Match": '"other"', "Range": "bytes=0-9"}
                        ).status_code == 206
        upload_url = f"/v1/files/{file_id}/content"
        assert http.get(upload_url, headers={"If-None-Match": f'"{file_id}"'}
                        ).status_code == 304

        for shape in ("bytes=" + "9" * 5000, "bytes=-" + "9" * 5000, "bytes=0-" + "9" * 5000,
                      "bytes=" + "1" * 5000 + "-", "bytes=-5-", "bytes=--1", "bytes=abc",
                      "bytes=0-1,5-9", "items=0-1", "bytes=", "bytes=-0", f"bytes={size}-",
                      "bytes=99999999999999999-", "bytes=5-2"):
            # HEAD of the large result file (its answer is decided as GET's), GET of the
            # upload
            answer = http.head(url, headers={"Range": shape})
            assert answer.status_code in (200, 416), (shape, answer.status_code)
            answer = http.get(upload_url, headers={"Range": shape})
            assert answer.status_code in (200, 416), (shape, answer.status_code)
            if answer.status_code == 200:
                assert int(answer.headers["content-length"]) == len(answer.content)
