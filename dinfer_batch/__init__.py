"""The job service, grouped by concern: `cli/` (the `dinfer-batch` command), `jobs/` (ingest,
chunk lifecycle, runner), `formats/` (input requests, parameters, output lines),
`storage/` (SQL tables and migrations); settings, device checks and model look-up beside
them."""
