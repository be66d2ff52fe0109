"""items and jobs: what each request costs, in generations (formats/lines/cost.py)

A line is counted at its cost in quotas, fair share and chunk sizing: n x its infill
candidates' canvases x the editing decoder's post-step factor (ADR 026). The item keeps
its cost for its line's metrics; the job the sum over its lines that run, for its usage.
NULL for everything written before this revision (a line of n samples then counted n).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 03:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('items') as batch:
        batch.add_column(sa.Column('cost', sa.BigInteger(), nullable=True))
    with op.batch_alter_table('jobs') as batch:
        batch.add_column(sa.Column('cost', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.drop_column('cost')
    with op.batch_alter_table('items') as batch:
        batch.drop_column('cost')
