"""The job service, grouped by concern: `cli/` (the `dinfer-batch` command), `jobs/` (ingest,
chunk lifecycle, runner), `formats/` (input requests, parameters, output lines),
`storage/` (SQL tables and migrations), `schedules/` (recurring jobs and the `beat` loop);
settings, device checks and model look-up beside them."""
