"""The dashboard's pure parts: where sign-in may send the browser back to, which forms
count as our own, durations, chart geometry, and the floor() that both databases run."""

import pytest
from sqlalchemy import column
from sqlalchemy.dialects import postgresql, sqlite
from starlette.requests import Request

from dinfer_batch.dashboard.access import local_path, same_origin
from dinfer_batch.dashboard.present import charts, duration, short_id
from dinfer_batch.dashboard.queries import Timeline, bucket


@pytest.mark.parametrize("target, expected", [
    ("/jobs/batch_1?x=1", "/jobs/batch_1?x=1"), ("/", "/"), (None, "/"), ("", "/"),
    ("//evil.example/", "/"), ("/\t/evil.example/", "/"), ("/\\evil.example", "/"),
    ("https://evil.example/", "/"), ("jobs", "/"),
])
def test_sign_in_returns_to_local_paths_only(target, expected):
    assert local_path(target) == expected


def request(headers):
    return Request({"type": "http", "method": "POST", "path": "/jobs/x/cancel",
                    "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]})


@pytest.mark.parametrize("headers, ours", [
    ({"Host": "127.0.0.1:8000", "Origin": "http://127.0.0.1:8000"}, True),
    ({"Host": "127.0.0.1:8000", "Referer": "http://127.0.0.1:8000/jobs/x/cancel"}, True),
    ({"Host": "127.0.0.1:8000", "Origin": "http://evil.example"}, False),
    ({"Host": "127.0.0.1:8000", "Origin": "http://127.0.0.1:8000.evil.example"}, False),
    ({"Host": "127.0.0.1:8000", "Origin": "null"}, False),
    ({"Host": "127.0.0.1:8000"}, False),
])
def test_forms_count_only_from_our_own_origin(headers, ours):
    assert same_origin(request(headers)) is ours


def test_durations_and_ids():
    assert [duration(s) for s in (None, -3, 0, 59, 60, 61, 3600, 3725, 90061)] == [
        "-", "0s", "0s", "59s", "1m", "1m 1s", "1h", "1h 2m", "1d 1h"]
    assert short_id("batch_0123456789abcdef0123456789abcdef") == "batch_01234567…"


def test_charts_accumulate_requests_and_divide_tokens_by_the_bucket():
    done, rate = charts(Timeline(start=0.0, width=2.0, done=[4, 0, 6], tokens=[8, 0, 2]))
    assert done.top == 10 and done.points.split()[-1].endswith(f",{10.0}")
    assert rate.top == 4 and len(rate.bars) == 2  # 8/2 and 2/2 tokens/s; no bar for 0
    assert charts(None) == []


def test_bucket_is_a_floor_on_both_databases():
    expression = bucket(column("x") / 2.0)
    assert "CAST(floor(" in str(expression.compile(dialect=postgresql.dialect()))
    assert str(expression.compile(dialect=sqlite.dialect())).startswith("CAST(x /")
