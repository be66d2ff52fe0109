"""items without a foreign key to jobs (PostgreSQL)

Checking it cost 40 % of the server's time in a million-line COPY, and it guards nothing:
items are written only by ingest, in the transaction that creates their job, and no job
is ever deleted. SQLite never enforced it (foreign_keys is off), so its schema keeps the
declaration rather than copying the items table to drop it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 14:30:00
"""

from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint('items_job_id_fkey', 'items', type_='foreignkey')


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.create_foreign_key('items_job_id_fkey', 'items', 'jobs', ['job_id'], ['id'])
