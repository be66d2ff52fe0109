"""workers: one row per worker process, kept fresh by its heartbeats

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 11:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('workers',
    sa.Column('id', sa.String(length=255), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('model', sa.Text(), nullable=False),
    sa.Column('device', sa.String(length=64), nullable=False),
    sa.Column('queues', sa.Text(), nullable=False),
    sa.Column('job_id', sa.String(length=64), nullable=True),
    sa.Column('chunk_id', sa.Integer(), nullable=True),
    sa.Column('items_done', sa.BigInteger(), nullable=False),
    sa.Column('tokens_per_s', sa.Float(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=False),
    sa.Column('heartbeat_at', sa.Float(), nullable=False),
    sa.Column('stopped_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_workers_heartbeat_at'), ['heartbeat_at'],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_workers_heartbeat_at'))
    op.drop_table('workers')
