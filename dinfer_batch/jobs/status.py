"""A job's status vocabulary, the OpenAI Batch object's: every module that asks whether a
job has ended reads it from here."""

STATUSES = ("validating", "in_progress", "finalizing", "completed", "failed", "cancelling",
            "cancelled", "expired")
ENDED = ("completed", "failed", "cancelled", "expired")
