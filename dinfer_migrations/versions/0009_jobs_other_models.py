"""jobs.other_models: how many request lines named a model other than the job's, by name

OpenAI batch files carry a `model` in every body; a job runs on its own model, so such
lines run (or, with --strict-model, fail) and the job counts them.

Revision ID: 0009
Revises: 0007
Create Date: 2026-12-01 07:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('other_models', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('other_models')
