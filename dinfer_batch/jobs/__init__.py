"""A job's life: streaming ingest into items and chunks, the chunk transactions a worker
goes through, running a chunk through the engine, and the operations on a job afterwards
(look up, list, cancel, retry) with its OpenAI Batch view."""
