"""Entitlements: what one owner's batches may ask of the fleet, set per API key (`keys
create/update`; the smallest of an owner's live keys' applies, as for quotas), shown by
`keys list` (docs/adr/017-tenants.md):

- `max_priority`: the highest priority its batches may take (default normal, 0): above it
  a batch is refused with 403, so priority is the operator's to give, not the tenant's;
- `max_chunk_size`: the largest chunk, in generations (its lines' costs,
  formats/lines/cost.py), it may ask for
  (default DEFAULT_CHUNK_SIZE, or DINFER_BATCH_MAX_CHUNK_SIZE): a chunk is what holds a
  worker, and "a new job starts within one chunk's run time" must not mean whatever the
  tenant chose; a line that alone costs more fails alone (jobs/intake/line_check.py);
- `max_request_tokens`: the most tokens one request may ask to generate, max_tokens x n
  (default DINFER_BATCH_MAX_REQUEST_TOKENS, else no limit beyond the model's context
  x 128 samples); a line over it fails alone, naming the field;
- `max_batch_requests`: the most lines one batch may hold (default
  DINFER_BATCH_MAX_BATCH_REQUESTS, else 50,000, OpenAI's): a file over it is refused
  while it is read, before it fills the database.

The API reads them from the caller's keys into the job's options (`JobOptions.entitled`,
which `make_spec` carries into the JobSpec); jobs made by the operator (the CLI's owner
`local`, schedules) have every entitlement (no ceiling)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.config import DEFAULT_CHUNK_SIZE, Settings
from dinfer_batch.errors import UserError
from dinfer_batch.jobs.spec import Entitlements, priority_name
from dinfer_batch.storage.tables import LOCAL_OWNER, ApiKey

MAX_BATCH_REQUESTS = 50_000  # OpenAI's limit of requests per batch


OPERATOR = Entitlements()  # owner local: the CLI's jobs


class NotEntitled(UserError):
    """A batch that asks for more than its key allows (HTTP 403); `param` names the field."""

    def __init__(self, param: str, message: str) -> None:
        self.param = param
        super().__init__(message)


def entitlements_of(session: Session, owner: str, config: Settings) -> Entitlements:
    if owner == LOCAL_OWNER:
        return OPERATOR
    row = session.execute(
        select(func.min(ApiKey.max_priority), func.min(ApiKey.max_chunk_size),
               func.min(ApiKey.max_request_tokens), func.min(ApiKey.max_batch_requests))
        .where(ApiKey.owner == owner, ApiKey.revoked_at.is_(None))).one()
    return Entitlements(
        max_priority=row[0] if row[0] is not None else 0,
        max_chunk_size=row[1] if row[1] is not None else (
            config.max_chunk_size or DEFAULT_CHUNK_SIZE),
        max_request_tokens=row[2] if row[2] is not None else config.max_request_tokens,
        max_batch_requests=row[3] if row[3] is not None else (
            config.max_batch_requests or MAX_BATCH_REQUESTS))


def owner_entitlements(sessions: sessionmaker[Session], owner: str,
                       config: Settings) -> Entitlements:
    """What `owner` may ask for: its keys' ceilings, else `config`'s (the service's
    DINFER_BATCH_MAX_* settings)."""
    with sessions() as session:
        return entitlements_of(session, owner, config)


def check_job(entitled: Entitlements, priority: int, chunk_size: int) -> None:
    """NotEntitled when the job's priority or chunk size is above the owner's."""
    if priority > entitled.max_priority:
        raise NotEntitled("priority", (
            f"priority {priority_name(priority)} ({priority}) is above this key's highest, "
            f"{priority_name(entitled.max_priority)} ({entitled.max_priority}); the "
            "operator sets it with `dinfer-batch keys update NAME --max-priority`"))
    if entitled.max_chunk_size is not None and chunk_size > entitled.max_chunk_size:
        raise NotEntitled("chunk_size", (
            f"chunk_size {chunk_size:,} is above this key's largest, "
            f"{entitled.max_chunk_size:,} generations (lines at their cost); the operator sets it "
            "with `dinfer-batch keys update NAME --max-chunk-size`"))

