"""workers: prompt tokens each worker's prefix cache gave back

A worker's heartbeat reports the prompt tokens its engine's prefix cache gave back since
it started (ADR 028), summed over its chunks, for `/metrics` and `dinfer-batch workers`.
Workers registered before count 0.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02 07:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('workers') as batch:
        batch.add_column(sa.Column('prefix_tokens_reused', sa.BigInteger(), nullable=False,
                                   server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('workers') as batch:
        batch.drop_column('prefix_tokens_reused')
