"""The job service, grouped by concern, one floor above another (docs/architecture.md):
`cli/` (the `dinfer-batch` command), `server.py` (the API server: `api/` and `dashboard/`),
`fleet/` (a worker process: replica, heartbeat, reaper), `schedules/` (recurring jobs and
the `beat` loop), `api/` (OpenAI's Files and Batches), `dashboard/` (the web pages),
`jobs/` (ingest, dispatch, chunks, runner, results), `webhooks/` (endpoints, events,
delivery), `formats/` (input requests, parameters, output lines), `storage/` (SQL tables,
connections, the workers table); settings, device checks and model look-up beside them."""
