"""Schedules in SQL: add (everything checked first, nothing stored on a refusal), look up,
list, pause, resume, remove (its jobs stay), and their runs."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.errors import UserError
from dinfer_batch.schedules.triggers import check_cron, check_every, describe, next_time
from dinfer_batch.storage.tables import Job, Schedule, ScheduleRun


@dataclass(frozen=True)
class Trigger:
    kind: str  # "cron" or "every"
    expr: str

    @classmethod
    def parse(cls, cron: str | None, every: str | None, min_every: float) -> Trigger:
        """A cron expression or an interval of at least `min_every` seconds."""
        if (cron is None) == (every is None):
            raise UserError("give exactly one of --cron EXPR and --every DURATION")
        if cron is not None:
            return cls("cron", check_cron(cron))
        return cls("every", check_every(every or "", min_every))


def add_schedule(sessions: sessionmaker[Session], name: str, trigger: Trigger,
                 spec: dict[str, Any], seed_base: int, same_seeds: bool,
                 overlap: bool) -> Schedule:
    """Store a schedule; `spec` (input, options, queue) must already be checked."""
    if not name.strip() or len(name) > 200 or not name.isprintable():
        raise UserError("a schedule name must be 1 to 200 printable characters")
    now = time.time()
    schedule = Schedule(name=name, spec=spec, trigger_kind=trigger.kind, trigger=trigger.expr,
                        seed_base=seed_base, same_seeds=same_seeds, overlap=overlap,
                        paused=False, created_at=now,
                        next_run_at=next_time(trigger.kind, trigger.expr, now, now))
    try:
        with sessions.begin() as session:
            if session.get(Schedule, name) is not None:
                raise UserError(f"a schedule named {name!r} already exists "
                                "(see `dinfer-batch schedule list`)")
            session.add(schedule)
    except IntegrityError:  # added by someone else between the check and the insert
        raise UserError(f"a schedule named {name!r} already exists") from None
    return schedule


def get_schedule(sessions: sessionmaker[Session], name: str) -> Schedule:
    with sessions() as session:
        schedule = session.get(Schedule, name)
    if schedule is None:
        raise UserError(f"no schedule named {name!r} (see `dinfer-batch schedule list`)")
    return schedule


def list_schedules(sessions: sessionmaker[Session]) -> list[Schedule]:
    with sessions() as session:
        return list(session.scalars(select(Schedule).order_by(Schedule.name)))


def runs_of(sessions: sessionmaker[Session], name: str,
            limit: int | None = None) -> list[tuple[ScheduleRun, str | None]]:
    """The schedule's runs, newest first, each with its job's status (None: no job)."""
    query = (select(ScheduleRun, Job.status).outerjoin(Job, Job.id == ScheduleRun.job_id)
             .where(ScheduleRun.schedule == name)
             .order_by(ScheduleRun.due_at.desc(), ScheduleRun.id.desc()).limit(limit))
    with sessions() as session:
        return [(run, status) for run, status in session.execute(query).all()]


def set_paused(sessions: sessionmaker[Session], name: str, paused: bool) -> Schedule:
    """Pause, or resume from now on (the times missed while paused are not made up)."""
    with sessions.begin() as session:
        schedule = session.get(Schedule, name)
        if schedule is None:
            raise UserError(f"no schedule named {name!r} (see `dinfer-batch schedule list`)")
        if not paused and schedule.paused:
            now = time.time()
            schedule.next_run_at = next_time(schedule.trigger_kind, schedule.trigger, now, now)
        schedule.paused = paused
    return schedule


def remove_schedule(sessions: sessionmaker[Session], name: str) -> int:
    """Delete the schedule and its runs; its jobs stay. Returns how many jobs it made."""
    with sessions.begin() as session:
        if session.get(Schedule, name) is None:
            raise UserError(f"no schedule named {name!r} (see `dinfer-batch schedule list`)")
        jobs = len(list(session.scalars(select(ScheduleRun.job_id).where(
            ScheduleRun.schedule == name, ScheduleRun.job_id.is_not(None)))))
        session.execute(delete(ScheduleRun).where(ScheduleRun.schedule == name))
        session.execute(delete(Schedule).where(Schedule.name == name))
    return jobs


def iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


def run_object(run: ScheduleRun, job_status: str | None) -> dict[str, Any]:
    return {"due": iso(run.due_at), "status": run.status, "job_id": run.job_id,
            "job_status": job_status, "seed_base": run.seed_base, "reason": run.reason}


def schedule_object(schedule: Schedule,
                    runs: list[tuple[ScheduleRun, str | None]]) -> dict[str, Any]:
    """The schedule as JSON, with `runs` (newest first) as given."""
    spec = schedule.spec
    return {"name": schedule.name, "trigger": describe(schedule.trigger_kind, schedule.trigger),
            "paused": schedule.paused, "next_run": iso(schedule.next_run_at),
            "last_run": run_object(*runs[0]) if runs else None,
            "input": spec["input"], "model": Path(spec["options"]["model"]).name,
            "options": spec["options"], "queue": spec["queue"],
            "seed_base": schedule.seed_base, "same_seeds": schedule.same_seeds,
            "overlap": schedule.overlap, "created": iso(schedule.created_at),
            "runs": [run_object(run, status) for run, status in runs]}
