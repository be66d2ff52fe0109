"""API keys: `dinfer-batch keys create NAME` makes a secret `sk-...` shown once; only its
SHA-256 is stored. A key belongs to an owner (default: its name); every file and batch
made with it belongs to that owner. An admin key (`--admin`) also reads what belongs to
the whole fleet: metrics and every owner's jobs. A plain hash suffices because the secrets are 256
random bits, not passwords a dictionary could guess."""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.errors import NotFound, UserError, WrongState
from dinfer_batch.formats.limits import shown
from dinfer_batch.jobs.intake.quota import Limits
from dinfer_batch.storage.tables import LOCAL_OWNER, ApiKey

PREFIX = "sk-"


class Caller(NamedTuple):
    """Who a request comes from: the key's owner, and whether the key is an admin key."""

    owner: str
    admin: bool


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", errors="replace")).hexdigest()


# what `keys create/update` set on a key (None: the service's default): the owner's quotas
# (jobs/intake/quota.py) and entitlements (jobs/intake/entitlements.py)
# and the administrator's grant to share cached prompt blocks (jobs/running/cache_scopes.py)
SETTINGS = ("max_enqueued_requests", "max_enqueued_tokens", "max_priority", "max_chunk_size",
            "max_request_tokens", "max_batch_requests", "shared_cache_salt")


def create_key(sessions: sessionmaker[Session], name: str, owner: str | None = None,
               admin: bool = False, limits: Limits = Limits(),
               settings: dict[str, int | str | None] | None = None) -> str:
    """Store a new key and return its secret (the only time it is seen). `limits`: its
    owner's quotas (jobs/intake/quota.py); `settings`: any of SETTINGS."""
    for what, value in (("key name", name), ("owner", owner or name)):
        if not value or len(value) > 200 or not value.isprintable():
            raise UserError(f"a {what} is 1-200 printable characters, got {shown(value)}")
    if (owner or name) == LOCAL_OWNER:
        raise UserError(f"the owner {LOCAL_OWNER!r} is reserved for the CLI's own jobs; "
                        "choose another owner (an --admin key reads every owner's jobs)")
    secret = PREFIX + secrets.token_urlsafe(32)
    with sessions.begin() as session:
        if session.get(ApiKey, name) is not None:
            raise UserError(f"a key named {name!r} exists already (see `dinfer-batch keys "
                            "list`)")
        session.add(ApiKey(name=name, owner=owner or name, secret_hash=secret_hash(secret),
                           created_at=time.time(), admin=admin,
                           **{"max_enqueued_requests": limits.requests,
                              "max_enqueued_tokens": limits.tokens, **_settings(settings)}))
    return secret


def update_key(sessions: sessionmaker[Session], name: str,
               settings: dict[str, int | str | None]) -> ApiKey:
    """Set key NAME's SETTINGS given in `settings` (None: back to the default)."""
    with sessions.begin() as session:
        key = session.get(ApiKey, name)
        if key is None:
            raise NotFound(f"no key named {name!r} (see `dinfer-batch keys list`)")
        for column, value in _settings(settings).items():
            setattr(key, column, value)
        session.flush()
        session.expunge(key)
    return key


def _settings(settings: dict[str, int | str | None] | None) -> dict[str, int | str | None]:
    unknown = set(settings or {}) - set(SETTINGS)
    assert not unknown, f"not a key setting: {unknown}"
    return dict(settings or {})


def list_keys(sessions: sessionmaker[Session]) -> list[ApiKey]:
    with sessions() as session:
        return list(session.scalars(select(ApiKey).order_by(ApiKey.created_at)))


def revoke_key(sessions: sessionmaker[Session], name: str) -> None:
    with sessions.begin() as session:
        key = session.get(ApiKey, name)
        if key is None:
            raise NotFound(f"no key named {name!r} (see `dinfer-batch keys list`)")
        if key.revoked_at is not None:
            raise WrongState(f"key {name!r} is already revoked")
        key.revoked_at = time.time()


def caller_of(sessions: sessionmaker[Session], secret: str) -> Caller | None:
    """Who holds a live key with this secret, else None (also for a key of the reserved
    owner `local` made before it was reserved)."""
    with sessions() as session:
        found = session.execute(select(ApiKey.owner, ApiKey.admin).where(
            ApiKey.secret_hash == secret_hash(secret), ApiKey.revoked_at.is_(None),
            ApiKey.owner != LOCAL_OWNER)).first()
    return None if found is None else Caller(found.owner, bool(found.admin))
