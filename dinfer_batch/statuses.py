"""The status vocabulary of every status column (storage/tables.py: a job's, the OpenAI
Batch object's; a chunk's; an item's; a schedule run's; a webhook delivery's) and, for
each, its table of legal moves: for each status, the statuses it may be entered from.
Every status write goes through storage/moves.py, which reads the sources here, and every
read compares against these members, so a status string is spelt here only and a new
status or move is one row (tests/service/test_status_vocabularies.py keeps it so;
docs/adr/044-one-transitions-table.md). A status no row may be entered from is one a row
is made with (an INSERT), never moved to. At the bottom of the service's floors, so the
formats and the webhooks read them too."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum


class JobStatus(StrEnum):
    VALIDATING = "validating"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


class ChunkStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"  # a worker holds it (`worker`); taken over once that worker is gone
    DONE = "done"
    CANCELLED = "cancelled"


class ItemStatus(StrEnum):
    PENDING = "pending"  # not run yet: its result is written only while it is pending
    COMPLETED = "completed"
    FAILED = "failed"


class RunStatus(StrEnum):
    """A schedule run's (ScheduleRun.status)."""

    STARTING = "starting"  # claimed by a beat, its job not made yet
    CREATED = "created"  # it made its job (`job_id`)
    SKIPPED = "skipped"  # the schedule's rules said no (`reason`)
    FAILED = "failed"  # making its job raised (`reason`)


class DeliveryStatus(StrEnum):
    """A webhook delivery's (WebhookDelivery.status)."""

    PENDING = "pending"  # being tried, until a 2xx or 24 h
    DELIVERED = "delivered"
    FAILED = "failed"  # given up, or its endpoint removed


Status = JobStatus | ChunkStatus | ItemStatus | RunStatus | DeliveryStatus

STATUSES = tuple(status.value for status in JobStatus)  # plain strings: click.Choice, JSON
ENDED = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.EXPIRED)
NOT_ENDED = tuple(status for status in JobStatus if status not in ENDED)
EXPIRABLE = (JobStatus.VALIDATING, JobStatus.IN_PROGRESS, JobStatus.FINALIZING)
OPEN_CHUNK = (ChunkStatus.QUEUED, ChunkStatus.RUNNING)

JOB_SOURCES: Mapping[JobStatus, tuple[JobStatus, ...]] = {
    JobStatus.VALIDATING: (),  # a job is made validating (jobs/intake/ingest.py)
    JobStatus.IN_PROGRESS: (JobStatus.VALIDATING, *ENDED),  # its lines stored; a retry
    JobStatus.FINALIZING: (JobStatus.IN_PROGRESS,),  # no chunk left open
    JobStatus.COMPLETED: (JobStatus.FINALIZING,),
    JobStatus.FAILED: NOT_ENDED,  # no valid line, no request succeeded, a crashed `run`
    JobStatus.CANCELLING: NOT_ENDED,  # a cancel (again: its time stamped anew)
    JobStatus.CANCELLED: (JobStatus.CANCELLING,),  # its last open chunk closed
    JobStatus.EXPIRED: EXPIRABLE,  # past its completion window
}

CHUNK_SOURCES: Mapping[ChunkStatus, tuple[ChunkStatus, ...]] = {
    # claimed: a queued chunk, or a running one whose worker is gone (the claim's
    # condition, chunk_state.without_live_claim)
    ChunkStatus.RUNNING: OPEN_CHUNK,
    # given back (a worker stopping warm, the reaper after a death), or a retry's
    ChunkStatus.QUEUED: (ChunkStatus.RUNNING, ChunkStatus.DONE, ChunkStatus.CANCELLED),
    ChunkStatus.DONE: (ChunkStatus.RUNNING,),
    ChunkStatus.CANCELLED: OPEN_CHUNK,
}

ITEM_SOURCES: Mapping[ItemStatus, tuple[ItemStatus, ...]] = {
    ItemStatus.PENDING: (ItemStatus.FAILED,),  # made pending by ingest; a retry
    ItemStatus.COMPLETED: (ItemStatus.PENDING,),  # its result written
    # its error written, or past its job's window; an invalid line is made failed
    ItemStatus.FAILED: (ItemStatus.PENDING,),
}

RUN_SOURCES: Mapping[RunStatus, tuple[RunStatus, ...]] = {
    RunStatus.STARTING: (),  # a run is made starting (schedules/beat.py)
    RunStatus.CREATED: (RunStatus.STARTING,),
    RunStatus.SKIPPED: (RunStatus.STARTING,),
    RunStatus.FAILED: (RunStatus.STARTING,),
}

DELIVERY_SOURCES: Mapping[DeliveryStatus, tuple[DeliveryStatus, ...]] = {
    DeliveryStatus.PENDING: (),  # a delivery is made pending (webhooks/events.py)
    DeliveryStatus.DELIVERED: (DeliveryStatus.PENDING,),
    DeliveryStatus.FAILED: (DeliveryStatus.PENDING,),
}
