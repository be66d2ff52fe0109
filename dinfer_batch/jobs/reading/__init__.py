"""Reading: what a job looks like from outside. Result files as lines and byte ranges,
their stored sizes and page digests, Parquet output, the OpenAI Batch view and a job's
place in its queue. Reads never write a job's status."""
