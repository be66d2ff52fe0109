"""leases for fleet-wide duties; the duplicates' partial index on items

`leases`: one row per fleet-wide duty (the reaper's passes), held by one process until
it expires, so that a fleet of 1,000 workers makes one pass per interval, not 1,000
(storage/leases.py, ADR 057). `ix_items_duplicates`: a result write copies each answer to
the item's pending duplicates (jobs/running/chunk_state.py: `record`); without it, finding
them read every item of the job, at each write (a million rows for a million-line job).
Only lines with `duplicate_of` are in it. The upgrade builds it in its transaction, which
holds writes to items while it reads the table: on a large table, build it first with
CREATE INDEX CONCURRENTLY (docs/fleet.md), and the upgrade leaves it as it is.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07 14:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None

DUPLICATES = sa.text("duplicate_of IS NOT NULL")


def upgrade() -> None:
    op.create_table(
        'leases',
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('holder', sa.String(length=255), nullable=False),
        sa.Column('expires_at', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('name'))
    op.create_index('ix_items_duplicates', 'items', ['job_id', 'duplicate_of'], unique=False,
                    sqlite_where=DUPLICATES, postgresql_where=DUPLICATES, if_not_exists=True)


def downgrade() -> None:
    op.drop_index('ix_items_duplicates', table_name='items')
    op.drop_table('leases')
