"""Quotas: how much one owner may have enqueued at once. An owner's enqueued requests are
counted at their cost, in generations (formats/lines/cost.py): the unfinished requests of its
unfinished jobs, plus cost - 1 for each request in their open chunks (a chunk's `cost`
less its lines: n - 1 for a plain line of n samples, 15 for one of 16 infill
candidates); its
enqueued tokens, their prompt tokens plus the canvas each sample decodes (max_tokens
rounded up to whole blocks, ADR 059; times `n`). A new batch asks for
every line of its file, invalid ones included (they were stored), each at its cost;
a retry asks for what it queues again, checked the same way (docs/adr/017-tenants.md).
Limits are set on the owner's API keys (`keys create/update
--max-enqueued-requests/--max-enqueued-tokens`; the smallest of its live keys' applies),
else come from DINFER_BATCH_MAX_ENQUEUED_REQUESTS / _TOKENS. The CLI's owner `local`
(which no key may take) is unlimited unless DINFER_BATCH_LOCAL_MAX_ENQUEUED_REQUESTS /
_TOKENS are set. A batch that would pass a limit is refused whole (ingest's transaction
rolls back: nothing written, nothing queued)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from dinfer_batch.config import Settings
from dinfer_batch.errors import UserError
from dinfer_batch.statuses import ENDED, OPEN_CHUNK, ItemStatus
from dinfer_batch.storage.tables import LOCAL_OWNER, ApiKey, Chunk, Item, Job


@dataclass(frozen=True)
class Limits:
    requests: int | None = None
    tokens: int | None = None


class QuotaExceeded(UserError):
    """A batch that would take its owner past a limit (HTTP 429)."""

    def __init__(self, owner: str, kind: str, limit: int, usage: int, asked: int) -> None:
        self.owner, self.kind, self.limit, self.usage, self.asked = (owner, kind, limit,
                                                                     usage, asked)
        super().__init__(f"enqueued {kind} limit of owner {owner!r} reached: limit {limit:,}, "
                         f"enqueued now {usage:,}, this batch asks {asked:,}; submit it "
                         "again when earlier batches have made progress")

    @property
    def param(self) -> str:
        return f"max_enqueued_{self.kind}"


def limits_of(session: Session, owner: str, config: Settings) -> Limits:
    """The owner's quotas: its keys', else `config`'s defaults."""
    if owner == LOCAL_OWNER:
        return Limits(config.local_max_enqueued_requests, config.local_max_enqueued_tokens)
    found = session.execute(
        select(func.min(ApiKey.max_enqueued_requests), func.min(ApiKey.max_enqueued_tokens))
        .where(ApiKey.owner == owner, ApiKey.revoked_at.is_(None))).one()
    return Limits(found[0] if found[0] is not None else config.max_enqueued_requests,
                  found[1] if found[1] is not None else config.max_enqueued_tokens)


def usage(session: Session, owner: str, but: str | None = None) -> tuple[int, int]:
    """(enqueued requests, enqueued tokens) of the owner's unfinished jobs, except `but`."""
    query = (select(func.coalesce(func.sum(Job.total_count - Job.completed_count
                                           - Job.failed_count), 0),
                    func.coalesce(func.sum(Job.enqueued_tokens), 0))
             .where(Job.owner == owner, Job.status.not_in(ENDED)))
    samples = (select(func.coalesce(func.sum(Chunk.cost - Chunk.size), 0))
               .join(Job, Job.id == Chunk.job_id)
               .where(Job.owner == owner, Job.status.not_in(ENDED),
                      Chunk.status.in_(OPEN_CHUNK), Chunk.cost.is_not(None)))
    if but is not None:
        query, samples = query.where(Job.id != but), samples.where(Job.id != but)
    requests, tokens = session.execute(query).one()
    return int(requests) + int(session.scalar(samples) or 0), int(tokens)


def check(session: Session, job: Job, limits: Limits, requests: int, tokens: int) -> None:
    """Raise QuotaExceeded if `job` (being ingested in `session`'s transaction) would take
    its owner past a limit. On PostgreSQL the owner's batches are checked one at a time (a
    lock held until the transaction ends), so two at once cannot both slip under it."""
    if limits.requests is None and limits.tokens is None:
        return
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(hashtext(:owner))"),
                        {"owner": f"dinfer_batch.quota:{job.owner}"})
    used_requests, used_tokens = usage(session, job.owner, but=job.id)
    for kind, limit, used, asked in (("requests", limits.requests, used_requests, requests),
                                     ("tokens", limits.tokens, used_tokens, tokens)):
        if limit is not None and used + asked > limit:
            raise QuotaExceeded(job.owner, kind, limit, used, asked)


def check_retry(session: Session, job: Job, chunk_ids: list[int], config: Settings) -> None:
    """The quota check of a retry (CLI, API, dashboard), in its transaction: the job's
    pending requests and the extra samples of the chunks it queues again count as a new
    batch of that size would, under the same lock."""
    limits = limits_of(session, job.owner, config)
    if limits.requests is None and limits.tokens is None:
        return
    pending = session.scalar(select(func.count()).select_from(Item).where(
        Item.job_id == job.id, Item.status == ItemStatus.PENDING)) or 0
    samples = session.scalar(select(func.coalesce(func.sum(Chunk.cost - Chunk.size), 0))
                             .where(Chunk.job_id == job.id, Chunk.chunk_id.in_(chunk_ids),
                                    Chunk.cost.is_not(None))) or 0
    check(session, job, limits, int(pending) + int(samples), job.enqueued_tokens)
