"""The web dashboard that `dinfer-batch api` serves at `/`: server-rendered pages over the
same job and fleet functions as the CLI and the API (see docs/adr/015-dashboard.md)."""
