"""The scheduler loop of `dinfer-batch beat`, and one run of a schedule.

Each tick reads the schedules table (so schedules added, paused or removed from the CLI take
effect at the next tick) and claims every due schedule in its own transaction: the claim
moves `next_run_at` on only if it still holds the due time that was read, and inserts the
run row, unique per (schedule, due time). Of two beat processes only one claim succeeds,
so a run is made once (docs/adr/003-schedules.md). The job is then made outside that
transaction; a run that cannot start (its input file is missing, the previous run's job is
still going) is recorded as skipped with the reason, and the schedule goes on."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from dinfer_batch.config import Settings
from dinfer_batch.errors import UserError
from dinfer_batch.formats.lines.columns import Columns
from dinfer_batch.jobs.create import create_job, job_input, job_spec
from dinfer_batch.schedules.store import iso
from dinfer_batch.schedules.triggers import next_time
from dinfer_batch.statuses import ENDED, RunStatus
from dinfer_batch.storage.db import changed
from dinfer_batch.storage.moves import move_rows
from dinfer_batch.storage.tables import Job, Schedule, ScheduleRun

if TYPE_CHECKING:
    from dinfer_workers.broker import Broker

log = logging.getLogger("dinfer_batch.beat")
SEED_RANGE = 2**31  # a run's fresh seed base; line numbers and samples are added to it


def claim_due(sessions: sessionmaker[Session], now: float) -> list[int]:
    """Claim the runs of every schedule due at `now`; returns the new run ids."""
    with sessions() as session:
        due = session.execute(select(Schedule.name, Schedule.next_run_at).where(
            Schedule.paused.is_(False), Schedule.next_run_at <= now)).all()
    claimed = []
    for name, due_at in due:
        try:
            with sessions.begin() as session:
                schedule = session.get(Schedule, name)
                if schedule is None:
                    continue
                following = next_time(schedule.trigger_kind, schedule.trigger, now, due_at)
                moved = changed(session,
                    update(Schedule).where(Schedule.name == name, Schedule.paused.is_(False),
                                           Schedule.next_run_at == due_at)
                    .values(next_run_at=following, last_run_at=due_at))
                if not moved:  # another beat claimed it, or it was paused meanwhile
                    continue
                run = ScheduleRun(schedule=name, due_at=due_at, status=RunStatus.STARTING.value,
                                  created_at=time.time())
                session.add(run)
                session.flush()
                claimed.append(run.id)
        except IntegrityError:  # the (schedule, due time) row exists: that run is made
            continue
    return claimed


def manual_run(sessions: sessionmaker[Session], broker: Broker, name: str,
               config: Settings) -> ScheduleRun:
    """`schedule run NAME`: one run now, under the same rules as a due one."""
    with sessions.begin() as session:
        if session.get(Schedule, name) is None:
            raise UserError(f"no schedule named {name!r} (see `dinfer-batch schedule list`)")
        run = ScheduleRun(schedule=name, due_at=time.time(), status=RunStatus.STARTING.value,
                          created_at=time.time())
        session.add(run)
        session.flush()
        run_id = run.id
    return start_run(sessions, broker, run_id, config)


def start_run(sessions: sessionmaker[Session], broker: Broker, run_id: int,
              config: Settings) -> ScheduleRun:
    """Make the run's job (on `config`, the beat's settings, its permits on `broker`), or
    record why it was skipped (or failed)."""
    with sessions() as session:
        run = session.get_one(ScheduleRun, run_id)
        schedule = session.get_one(Schedule, run.schedule)
    seed_base = schedule.seed_base if schedule.same_seeds else secrets.randbelow(SEED_RANGE)
    values: dict[str, Any] = {"seed_base": seed_base}
    try:
        busy = None if schedule.overlap else _unfinished_job(sessions, schedule.name, run_id)
        if busy is not None:
            raise UserError(f"the previous run's job {busy.id} is still {busy.status} "
                            "(add the schedule with --overlap to run anyway)")
        job = _make_job(sessions, broker, schedule, run, seed_base, config)
        to, values = RunStatus.CREATED, values | {"job_id": job.id}
    except UserError as exc:
        to, values = RunStatus.SKIPPED, values | {"reason": str(exc)}
    except Exception as exc:  # the beat goes on; the run says what went wrong
        log.exception("schedule %s: run due %s failed", schedule.name, iso(run.due_at))
        to, values = RunStatus.FAILED, values | {"reason": f"{type(exc).__name__}: {exc}"}
    with sessions.begin() as session:
        move_rows(session, to, ScheduleRun.id == run_id, **values)
    with sessions() as session:
        return session.get_one(ScheduleRun, run_id)


def _unfinished_job(sessions: sessionmaker[Session], name: str, run_id: int) -> Job | None:
    """The job of the schedule's latest earlier run that made one, if it has not ended."""
    with sessions() as session:
        job_id = session.scalar(
            select(ScheduleRun.job_id)
            .where(ScheduleRun.schedule == name, ScheduleRun.id != run_id,
                   ScheduleRun.job_id.is_not(None))
            .order_by(ScheduleRun.due_at.desc(), ScheduleRun.id.desc()).limit(1))
        job = session.get(Job, job_id) if job_id else None
    return job if job is not None and job.status not in ENDED else None


def _make_job(sessions: sessionmaker[Session], broker: Broker, schedule: Schedule,
              run: ScheduleRun, seed_base: int, config: Settings) -> Job:
    source = schedule.spec["input"]
    for path in (source.get("file"), source.get("vars"), source.get("template_file")):
        if path is not None and not Path(path).is_file():
            raise UserError(f"input file not found: {path}")
    template = source.get("template_file") or source.get("template")
    file = source.get("file")
    path, parsed = job_input(Path(file) if file else None, template,
                             Path(source["vars"]) if "vars" in source else None,
                             source.get("messages", False),
                             Columns(**source["columns"]) if "columns" in source else None)
    options = schedule.spec["options"] | {"seed_base": seed_base}
    options["metadata"] = [*options["metadata"], f"schedule={schedule.name}",
                           f"run={iso(run.due_at)}"]
    spec = job_spec(options, schedule.spec["queue"], config.model_dir)
    return create_job(sessions, broker, path, spec, config, parsed)


def run_beat(sessions: sessionmaker[Session], broker: Broker, interval: float,
             stop: threading.Event, config: Settings) -> None:
    """Tick every `interval` seconds until `stop` is set: claim what is due, make its jobs.
    A tick that fails (the database is unreachable for a moment) is logged and the next
    one tries again."""
    while not stop.is_set():
        try:
            for run_id in claim_due(sessions, time.time()):
                run = start_run(sessions, broker, run_id, config)
                log.info("schedule %s, run due %s: %s", run.schedule, iso(run.due_at),
                         f"job {run.job_id}" if run.job_id else f"{run.status}: {run.reason}")
        except Exception:
            log.exception("beat tick failed; trying again in %gs", interval)
        stop.wait(interval)
