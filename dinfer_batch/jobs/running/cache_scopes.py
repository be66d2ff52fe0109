"""Whose cached prompt blocks a line may reuse on a worker (docs/adr/040-prefix-cache-owners.md):
its job's owner, narrowed by the line's (or job's) `cache_salt`. An owner all of whose
live keys carry the same administrator's grant (`keys create/update
--shared-cache-salt NAME`) shares with every other owner granted NAME instead; a key
without it keeps its owner apart (the default). Read when a worker runs a chunk, so a
grant taken back applies from the next chunk on."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.errors import UserError
from dinfer_batch.formats.limits import shown
from dinfer_batch.storage.tables import ApiKey
from dinfer_engine.cache_scope import CacheScope

MAX_SHARED_SALT_CHARS = 64
# accounts: an owner's, or granted owners' (prefixed, so no owner's name is a grant's)
OWNER, SHARED = "owner:", "shared:"


def check_shared_salt(value: str) -> str:
    if not 0 < len(value) <= MAX_SHARED_SALT_CHARS or not value.isprintable():
        raise UserError(f"a shared cache salt is 1-{MAX_SHARED_SALT_CHARS} printable "
                        f"characters, got {shown(value)}")
    return value


def account_of(sessions: sessionmaker[Session], owner: str) -> str:
    """The prefix cache account of the owner's lines."""
    with sessions() as session:
        grants = set(session.scalars(select(ApiKey.shared_cache_salt).where(
            ApiKey.owner == owner, ApiKey.revoked_at.is_(None))))
    if len(grants) == 1 and (grant := grants.pop()) is not None:
        return SHARED + grant
    return OWNER + owner


def line_scope(account: str, params: dict[str, Any]) -> CacheScope:
    """A line's scope from its effective parameters (the job's under the line's)."""
    return CacheScope(account, params.get("cache_salt", ""))
