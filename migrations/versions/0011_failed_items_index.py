"""a partial index on the failed items of each job

The dashboard's job page lists a job's first failed requests; without this index finding
them reads every item of the job (a million rows for a million-request job). Only failed
items are in it, so writing a completed item never touches it.

Revision ID: 0011
Revises: 0006
Create Date: 2026-12-01 07:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0006'
branch_labels = None
depends_on = None

FAILED = sa.text("status = 'failed'")


def upgrade() -> None:
    op.create_index('ix_items_failed', 'items', ['job_id', 'line'], unique=False,
                    sqlite_where=FAILED, postgresql_where=FAILED)


def downgrade() -> None:
    op.drop_index('ix_items_failed', table_name='items')
