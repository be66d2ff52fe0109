"""dispatch and quotas: job priority, fair-share state, enqueued tokens, key limits

Revision ID: 0007
Revises: 0011
Create Date: 2026-12-01 07:20:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('priority', sa.Integer(), nullable=False,
                                      server_default='0'))
        batch_op.add_column(sa.Column('served', sa.Float(), nullable=False,
                                      server_default='0'))
        batch_op.add_column(sa.Column('enqueued_tokens', sa.BigInteger(), nullable=False,
                                      server_default='0'))
    with op.batch_alter_table('items', schema=None) as batch_op:
        batch_op.add_column(sa.Column('tokens', sa.Integer(), nullable=True))
    with op.batch_alter_table('chunks', schema=None) as batch_op:
        batch_op.create_index('ix_chunks_job_status', ['job_id', 'status', 'chunk_id'],
                              unique=False)
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.add_column(sa.Column('max_enqueued_requests', sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column('max_enqueued_tokens', sa.BigInteger(), nullable=True))
    op.create_table('fair_shares',
    sa.Column('queue', sa.String(length=200), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('owner', sa.String(length=200), nullable=False),
    sa.Column('served', sa.Float(), nullable=False),
    sa.Column('job_clock', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('queue', 'priority', 'owner')
    )


def downgrade() -> None:
    op.drop_table('fair_shares')
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.drop_column('max_enqueued_tokens')
        batch_op.drop_column('max_enqueued_requests')
    with op.batch_alter_table('chunks', schema=None) as batch_op:
        batch_op.drop_index('ix_chunks_job_status')
    with op.batch_alter_table('items', schema=None) as batch_op:
        batch_op.drop_column('tokens')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('enqueued_tokens')
        batch_op.drop_column('served')
        batch_op.drop_column('priority')
