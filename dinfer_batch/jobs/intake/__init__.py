"""Intake: what happens to a file before any worker sees it. Streaming ingest and its
transactions, per-line checks, duplicates, the order lines are placed into chunks,
Parquet input, and the quotas and entitlements a job is admitted under."""
