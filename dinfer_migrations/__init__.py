"""Alembic's scripts for the SQL schema, as package data (env.py, versions/): the service
upgrades from wherever the distribution is installed (dinfer_batch/storage/db.py)."""

from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
