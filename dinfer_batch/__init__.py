"""The job service: configuration, SQL storage, streaming ingest, job lifecycle, output
formats and the `dinfer-batch` command line."""
