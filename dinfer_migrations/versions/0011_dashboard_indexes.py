"""indexes for the dashboard: jobs newest first, failed items of a job

The jobs list (`dinfer-batch list`, GET /v1/batches, the dashboard) is newest first: with
(created_at, id), and (owner, created_at, id) for one owner's jobs, a page is read in
index order instead of sorting every job. The dashboard's job page lists a job's first
failed requests: without the partial index finding them reads every item of the job (a
million rows for a million-request job); only failed items are in it, so writing a
completed item never touches it.

Revision ID: 0011
Revises: 0008
Create Date: 2026-12-01 07:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0008'
branch_labels = None
depends_on = None

FAILED = sa.text("status = 'failed'")


def upgrade() -> None:
    op.create_index('ix_jobs_created', 'jobs', ['created_at', 'id'], unique=False)
    op.create_index('ix_jobs_owner_created', 'jobs', ['owner', 'created_at', 'id'],
                    unique=False)
    op.create_index('ix_items_failed', 'items', ['job_id', 'line'], unique=False,
                    sqlite_where=FAILED, postgresql_where=FAILED)


def downgrade() -> None:
    op.drop_index('ix_items_failed', table_name='items')
    op.drop_index('ix_jobs_owner_created', table_name='jobs')
    op.drop_index('ix_jobs_created', table_name='jobs')
