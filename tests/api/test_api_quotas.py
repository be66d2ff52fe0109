"""Quotas through the official `openai` client against a real server, a real worker, real
Redis, SQLite and PostgreSQL: a batch that would pass its owner's enqueued requests or
tokens limit gets 429 in OpenAI's error shape and queues nothing; usage falls as requests
finish, and the batch then goes through. Priority travels in `extra_body`."""

import openai
import pytest
import redis
from sqlalchemy import func, select

from dinfer_batch.jobs.intake.quota import usage
from dinfer_batch.statuses import ENDED
from dinfer_batch.storage.tables import Job
from dinfer_engine.loading.tokenizer import load_token_counter
from tests.service_helpers import REDIS_URL, wait_for, write_jsonl

pytestmark = pytest.mark.integration

MAX_TOKENS = 8


def upload(client, path, count, tag):
    write_jsonl(path, [{"custom_id": f"{tag}{i}", "method": "POST", "url": "/v1/completions",
                        "body": {"prompt": f"{tag} prompt {i}", "max_tokens": MAX_TOKENS,
                                 "block_length": MAX_TOKENS}} for i in range(count)])
    with path.open("rb") as handle:
        return client.files.create(file=handle, purpose="batch").id


def create(client, file_id, **extra):
    return client.batches.create(input_file_id=file_id, endpoint="/v1/completions",
                                 completion_window="24h", extra_body=extra or None)


def owner_usage(api, owner="alice"):
    with api.service.sessions()() as session:
        return usage(session, owner)


def jobs_of(api, owner="alice"):
    with api.service.sessions()() as session:
        return session.scalar(select(func.count()).select_from(Job).where(Job.owner == owner))


def key_name(api, owner="alice"):
    return f"{owner}-{api.url.rsplit(':', 1)[1]}"


def test_enqueued_limits_refuse_a_batch_whole_and_free_up_as_requests_finish(api, tmp_path):
    service, client = api.service, api.client()
    tokens = load_token_counter(service.model).counts([f"a prompt {i}" for i in range(6)])
    per_batch = sum(tokens) + 6 * MAX_TOKENS  # prompt tokens + max tokens, six requests
    result = service.cli("keys", "update", key_name(api), "--max-enqueued-requests", "10",
                         "--max-enqueued-tokens", str(2 * per_batch - 1),
                         "--max-priority", "high")
    assert result.exit_code == 0, result.output
    first = create(client, upload(client, tmp_path / "a.jsonl", 6, "a"), priority="high")
    assert (first.status, first.model_extra["priority"]) == ("in_progress", "high")
    assert owner_usage(api) == (6, per_batch)

    # 6 + 6 requests > 10: refused whole, with the limit, the usage and what it asked
    second_file = upload(client, tmp_path / "b.jsonl", 6, "a")  # same token counts
    with pytest.raises(openai.RateLimitError) as refused:
        create(client, second_file)
    assert refused.value.status_code == 429
    error = refused.value.body
    assert (error["type"], error["code"], error["param"]) == (
        "requests", "rate_limit_exceeded", "max_enqueued_requests")
    assert (error["limit"], error["usage"], error["requested"]) == (10, 6, 6)
    assert "limit 10, enqueued now 6, this batch asks 6" in error["message"]
    assert jobs_of(api) == 1 and owner_usage(api) == (6, per_batch)  # nothing queued
    assert redis.Redis.from_url(REDIS_URL).llen(service.queue) == 1  # the first's permit

    # the tokens limit, once the requests limit allows the batch
    assert service.cli("keys", "update", key_name(api), "--default-requests").exit_code == 0
    with pytest.raises(openai.RateLimitError) as refused:
        create(client, second_file)
    error = refused.value.body
    assert (error["type"], error["param"]) == ("tokens", "max_enqueued_tokens")
    assert (error["usage"], error["requested"]) == (per_batch, per_batch)
    assert jobs_of(api) == 1
    other = api.client("bob")  # another owner is not held back by alice's usage
    assert create(other, upload(other, tmp_path / "c.jsonl", 6, "a")).status == "in_progress"

    # usage falls as requests finish; then the batch goes through
    service.start_worker(tmp_path / "worker.log",
                         DINFER_BATCH_ENGINE="tests.stand_in_engines:InstantEngine",
                         STAND_IN_SECONDS_PER_CALL="0.5", DINFER_BATCH_ENGINE_BATCH="1")
    seen = []
    wait_for(lambda: seen.append(owner_usage(api)) or seen[-1] == (0, 0), 120, poll=0.1)
    assert any(0 < requests < 6 and 0 < tokens < per_batch for requests, tokens in seen)
    wait_for(lambda: client.batches.retrieve(first.id).status in ENDED, 60)  # chunk closed
    assert create(client, second_file).status == "in_progress"


def test_priority_must_be_a_level_or_an_integer(sqlite_api, tmp_path):
    client = sqlite_api.client()
    file_id = upload(client, tmp_path / "a.jsonl", 1, "a")
    with pytest.raises(openai.BadRequestError) as bad:
        create(client, file_id, priority="urgent")
    assert bad.value.body["param"] == "priority"
    assert "priority must be low, normal, high or an integer" in bad.value.body["message"]
    with pytest.raises(openai.PermissionDeniedError) as denied:  # above the key's normal
        create(client, file_id, priority=5)
    assert (denied.value.body["param"], denied.value.body["code"]) == ("priority",
                                                                      "not_entitled")
    assert "priority 5 (5) is above this key's highest, normal (0)" in denied.value.body[
        "message"]
    assert sqlite_api.service.cli("keys", "update", key_name(sqlite_api), "--max-priority",
                                  "5").exit_code == 0
    assert create(client, file_id, priority=5).model_extra["priority"] == "5"


def test_cli_jobs_are_unlimited_unless_local_limits_are_set(sqlite_service, tmp_path):
    service = sqlite_service
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": f"p{i}"} for i in range(5)])
    service.env["DINFER_BATCH_MAX_ENQUEUED_REQUESTS"] = "1"  # the API keys' default only
    assert service.cli("submit", path).exit_code == 0
    service.env["DINFER_BATCH_LOCAL_MAX_ENQUEUED_REQUESTS"] = "8"
    refused = service.cli("submit", path)
    assert refused.exit_code == 2
    assert ("enqueued requests limit of owner 'local' reached: limit 8, enqueued now 5, "
            "this batch asks 5") in refused.output
    with service.sessions()() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 1
    assert redis.Redis.from_url(REDIS_URL).llen(service.queue) == 1
