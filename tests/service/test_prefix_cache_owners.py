"""The prefix cache kept apart by owner through the service (docs/adr/040-prefix-cache-owners.md):
a real API and a real worker on a tiny LLaDA2 with a prefix cache, SQLite and PostgreSQL.
Another owner's identical prefix is never reused (its line counts as a fresh prompt's);
the same owner reuses across batches; `cache_salt` splits one owner; owners granted one
shared salt by the administrator share; the cached tokens each line reports equal the
prompt tokens it reused, and the batch object, /metrics and `status` sum them."""

from __future__ import annotations

import json
import random
import string
from dataclasses import replace

import httpx2 as httpx
import openai
import pytest

from dinfer_batch.statuses import ENDED
from tests.api.test_api_quotas import create, key_name
from tests.api_helpers import start_api, stop_api
from tests.service_helpers import write_jsonl
from tests.tiny_moe import write_tiny_moe

SMALL = {"max_tokens": 8, "block_length": 8}
PRIVATE = "alice's private template: you answer like a judge, in one word, no more. q: "
OTHER = "a template of the same length as alice's, words of its own here: q! "
OTHER = OTHER + "x" * (len(PRIVATE) - len(OTHER))
SHARED = "a template two granted owners share: you answer like a poet, in one word: "


def started(service, tmp_path, megabytes: str):
    """The API and one worker on a tiny LLaDA2 with a prefix cache of `megabytes`."""
    checkpoint = write_tiny_moe(tmp_path / "llada2", "llada2")
    service = replace(service, model=checkpoint,
                      env=service.env | {"DINFER_BATCH_MODEL": str(checkpoint),
                                         "DINFER_BATCH_PREFIX_CACHE_MB": megabytes})
    api = start_api(service, tmp_path)
    service.start_worker(tmp_path / "worker.log")
    return api


@pytest.fixture
def owners(service, tmp_path):
    api = started(service, tmp_path, "64")
    yield api
    stop_api(api)


@pytest.fixture
def small_cache(service, tmp_path):
    """A budget of 1 MB: about 2,700 of the tiny model's prompt tokens."""
    api = started(service, tmp_path, "1")
    yield api
    stop_api(api)


def run_batch(api, owner, prompts, tag, job=None, **body):
    """One batch of `owner` with these prompts (`job`: the batch's own parameters); its
    batch object and result bodies (or error lines, for a batch whose lines all failed)."""
    client = api.client(owner)
    path = write_jsonl(api.log.with_name(f"{tag}.jsonl"),
                       [{"custom_id": f"{tag}{i}", "method": "POST", "url": "/v1/completions",
                         "body": {"model": "m", "prompt": p, **SMALL, **body}}
                        for i, p in enumerate(prompts)])
    with path.open("rb") as handle:
        file_id = client.files.create(file=handle, purpose="batch").id
    batch = create(client, file_id, **(job or {}))
    api.service.wait_job(batch.id, lambda j: j.status in ENDED, 300)
    batch = client.batches.retrieve(batch.id)
    if batch.status != "completed":
        return batch, [json.loads(line)["error"] for line in
                       client.files.content(batch.error_file_id).text.splitlines()]
    return batch, [json.loads(line)["response"]["body"] for line in
                   client.files.content(batch.output_file_id).text.splitlines()]


def reused(bodies):
    return [b["metrics"]["prefix_tokens_reused"] for b in bodies]


def test_owners_apart_salts_and_granted_sharing(owners, tmp_path):
    api = owners
    whole = len(PRIVATE) // 8 * 8 - 8  # at least the template's whole blocks but one
    _, first = run_batch(api, "alice", [PRIVATE + f"item {i}?" for i in range(4)], "a1")
    assert sorted(reused(first))[0] == 0 and all(r >= whole for r in sorted(reused(first))[1:])

    # bob's line with alice's prefix counts as his line with a prefix of his own
    bob_batch, bob = run_batch(api, "bob", [PRIVATE + "item 0?", OTHER + "item 0?"], "b1")
    assert reused(bob) == [0, 0]
    assert bob[0]["usage"] == bob[1]["usage"] | {"completion_tokens": bob[0]["usage"][
        "completion_tokens"], "total_tokens": bob[0]["usage"]["total_tokens"]}
    assert bob[0]["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert bob_batch.usage.input_tokens_details.cached_tokens == 0

    # alice reuses her template in a later batch: every line, its cached tokens reported
    again_batch, again = run_batch(api, "alice", [PRIVATE + f"item {i}!" for i in range(3)],
                                   "a2")
    assert all(r >= whole for r in reused(again))
    assert [b["usage"]["prompt_tokens_details"]["cached_tokens"] for b in again] == \
        reused(again)
    assert again_batch.usage.input_tokens_details.cached_tokens == sum(reused(again))

    # a cache_salt splits alice's lines from her own unsalted ones, and shares among equals
    _, salted = run_batch(api, "alice", [PRIVATE + "item 0?", PRIVATE + "item 9?"], "a3",
                          cache_salt="end-user-1")
    assert reused(salted)[0] == 0 and reused(salted)[1] >= whole
    _, per_job = run_batch(api, "alice", [PRIVATE + "item 5?"], "a5",
                           job={"cache_salt": "end-user-1"})
    assert reused(per_job)[0] >= whole
    for bad in ("", "x" * 257, 7):
        with pytest.raises(openai.BadRequestError, match="cache_salt must be a string"):
            create(api.client("alice"), api.client("alice").files.list().data[0].id,
                   cache_salt=bad)
        _, errors = run_batch(api, "alice", ["x"], "bad", cache_salt=bad)
        assert errors[0]["code"] == "invalid_request"
        assert "cache_salt must be a string of 1 to 256 characters" in errors[0]["message"]

    # an administrator's grant of one shared salt to both owners: they share
    for owner in ("alice", "bob"):
        assert api.service.cli("keys", "update", key_name(api, owner),
                               "--shared-cache-salt", "team").exit_code == 0
    _, granted = run_batch(api, "alice", [SHARED + "item 0?"], "a4")
    _, shared = run_batch(api, "bob", [SHARED + "item 1?"], "b2")
    assert reused(granted) == [0] and reused(shared)[0] >= len(SHARED) // 8 * 8 - 8
    assert shared[0]["usage"]["prompt_tokens_details"]["cached_tokens"] == reused(shared)[0]

    # owner-free totals: /metrics and `status`
    total = sum(sum(reused(b)) for b in (first, bob, again, salted, per_job, granted, shared))
    scraped = httpx.get(f"{api.url}/metrics", headers={
        "Authorization": f"Bearer {api.keys['admin']}"}).text
    assert f"dinfer_batch_cached_tokens_total {float(total)}" in scraped
    status = api.service.cli("status", again_batch.id).output
    assert f"{sum(reused(again)):,} cached prompt tokens" in status


def test_the_shared_salt_grant_is_the_administrators(sqlite_service):
    """Granted, shown and taken back with `keys`; a bad name is a usage error."""
    from dinfer_batch.jobs.running.cache_scopes import account_of

    service = sqlite_service
    assert service.cli("keys", "create", "k1", "--owner", "carol").exit_code == 0
    assert account_of(service.sessions(), "carol") == "owner:carol"
    assert service.cli("keys", "update", "k1", "--shared-cache-salt", "team").exit_code == 0
    assert "team" in service.cli("keys", "list").output
    assert account_of(service.sessions(), "carol") == "shared:team"
    # a second live key without the grant: the owner keeps to itself
    assert service.cli("keys", "create", "k2", "--owner", "carol").exit_code == 0
    assert account_of(service.sessions(), "carol") == "owner:carol"
    assert service.cli("keys", "revoke", "k2").exit_code == 0
    assert service.cli("keys", "update", "k1", "--default",
                       "shared-cache-salt").exit_code == 0
    assert account_of(service.sessions(), "carol") == "owner:carol"
    bad = service.cli("keys", "update", "k1", "--shared-cache-salt", "x" * 65)
    assert bad.exit_code == 2 and "a shared cache salt is 1-64 printable" in bad.output


def test_a_flooding_owner_leaves_anothers_reuse_as_idle(small_cache):
    """Bob's template, reused across batches; alice then floods 40 distinct prompts of
    200 tokens (3x the budget): bob's next batch reuses within 10 % of what it did
    before the flood (the owner above its share evicts its own blocks first)."""
    api, letters = small_cache, random.Random(0)
    template = SHARED + SHARED  # about 150 tokens: 18 whole blocks
    prompts = [template + f"item {i}?" for i in range(2)]
    run_batch(api, "bob", prompts, "b1")
    _, idle = run_batch(api, "bob", prompts, "b2")
    flood = ["".join(letters.choice(string.ascii_lowercase) for _ in range(200))
             for _ in range(40)]
    run_batch(api, "alice", flood, "a1")
    _, flooded = run_batch(api, "bob", prompts, "b3")
    assert sum(reused(idle)) >= 2 * (len(template) // 8 - 1) * 8
    assert sum(reused(flooded)) >= 0.9 * sum(reused(idle))
