"""Leases: a fleet-wide duty (the reaper's passes: jobs/running/dispatch.py's top-ups,
expiry, dead workers' chunks) done by one process at a time, whichever holds its lease.

A lease is a row (`leases`: name, holder, expires_at). `take` is one statement, an
INSERT ... ON CONFLICT DO UPDATE whose update only applies while the row is the caller's
or has expired, so two processes never both hold it, on PostgreSQL (directly or through
PgBouncer in transaction pooling: no session state, no advisory lock) and on SQLite
alike. The holder renews it at each pass; when it dies, the lease expires and the next
process that asks takes it over. Holding it is an optimisation, never a condition of
correctness: every change a pass makes is a conditional UPDATE, so two passes at once
(a holder stalled past its lease) still change each row once
(docs/adr/057-fleet-work-once.md)."""

from __future__ import annotations

import time

from sqlalchemy import or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.storage.tables import Lease

REAPER = "reaper"  # the reaper's passes (fleet/reaper.py)


def take(sessions: sessionmaker[Session], name: str, holder: str, seconds: float,
         now: float | None = None) -> bool:
    """Hold (or renew) the lease `name` for `holder` for `seconds` from now; False when
    another holder's lease has not expired."""
    with sessions.begin() as session:
        return take_in(session, name, holder, seconds, now)


def take_in(session: Session, name: str, holder: str, seconds: float,
            now: float | None = None) -> bool:
    """`take`, in the caller's transaction (a worker's heartbeat asks in its own). The
    row is read first: while another holder's lease runs, asking writes nothing, so a
    fleet's heartbeats do not queue on the lease's row (an upsert locks it even when its
    condition then declines); the upsert's condition still decides."""
    now = time.time() if now is None else now
    held = session.execute(select(Lease.holder, Lease.expires_at)
                           .where(Lease.name == name)).first()
    if held is not None and held.holder != holder and held.expires_at >= now:
        return False
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    insert = dialect.insert(Lease).values(name=name, holder=holder, expires_at=now + seconds)
    statement = insert.on_conflict_do_update(
        index_elements=[Lease.name],
        set_={"holder": holder, "expires_at": now + seconds},
        where=or_(Lease.holder == holder, Lease.expires_at < now),
    ).returning(Lease.holder)
    return session.execute(statement).first() is not None


def give_up(sessions: sessionmaker[Session], name: str, holder: str) -> None:
    """Let the lease go at once (a clean stop), so that another process takes it at its
    next try instead of after the lease's expiry."""
    with sessions.begin() as session:
        session.execute(update(Lease).where(Lease.name == name, Lease.holder == holder)
                        .values(expires_at=0.0))
