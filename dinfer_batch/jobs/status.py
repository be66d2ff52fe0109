"""The status vocabularies of a job (the OpenAI Batch object's) and of a chunk, and the
one table of their legal moves: for each status, the statuses it may be entered from.
Every status write goes through jobs/transitions.py, which reads the sources here, so a
new status or move is one row (docs/adr/044-one-transitions-table.md)."""

from __future__ import annotations

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


STATUSES = tuple(status.value for status in JobStatus)  # plain strings: click.Choice, JSON
ENDED = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.EXPIRED)
NOT_ENDED = tuple(status for status in JobStatus if status not in ENDED)
EXPIRABLE = (JobStatus.VALIDATING, JobStatus.IN_PROGRESS, JobStatus.FINALIZING)
OPEN_CHUNK = (ChunkStatus.QUEUED, ChunkStatus.RUNNING)

JOB_SOURCES: dict[JobStatus, tuple[JobStatus, ...]] = {
    JobStatus.VALIDATING: (),  # a job is made validating (jobs/ingest.py)
    JobStatus.IN_PROGRESS: (JobStatus.VALIDATING, *ENDED),  # its lines stored; a retry
    JobStatus.FINALIZING: (JobStatus.IN_PROGRESS,),  # no chunk left open
    JobStatus.COMPLETED: (JobStatus.FINALIZING,),
    JobStatus.FAILED: NOT_ENDED,  # no valid line, no request succeeded, a crashed `run`
    JobStatus.CANCELLING: NOT_ENDED,  # a cancel (again: its time stamped anew)
    JobStatus.CANCELLED: (JobStatus.CANCELLING,),  # its last open chunk closed
    JobStatus.EXPIRED: EXPIRABLE,  # past its completion window
}

CHUNK_SOURCES: dict[ChunkStatus, tuple[ChunkStatus, ...]] = {
    # claimed: a queued chunk, or a running one whose worker is gone (the claim's
    # condition, chunk_state.without_live_claim)
    ChunkStatus.RUNNING: OPEN_CHUNK,
    # given back (a worker stopping warm, the reaper after a death), or a retry's
    ChunkStatus.QUEUED: (ChunkStatus.RUNNING, ChunkStatus.DONE, ChunkStatus.CANCELLED),
    ChunkStatus.DONE: (ChunkStatus.RUNNING,),
    ChunkStatus.CANCELLED: OPEN_CHUNK,
}
