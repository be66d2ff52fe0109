"""items: prompt tokens the engine's prefix cache gave back

Block-causal models (LLaDA2, LLaDA2.1) share whole prompt blocks' keys/values across the
rows, chunks and jobs of one worker (ADR 028); a line's metrics say how many of its
prompt tokens were reused, summed over its samples. NULL where no cache ran (the
bidirectional families, DINFER_BATCH_PREFIX_CACHE_MB=0, items written before).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 03:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('items') as batch:
        batch.add_column(sa.Column('prefix_tokens_reused', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('items') as batch:
        batch.drop_column('prefix_tokens_reused')
