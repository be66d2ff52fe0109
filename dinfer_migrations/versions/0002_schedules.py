"""schedules and their runs; samples, seeds and duplicates on jobs and items

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 11:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('seed_base', sa.BigInteger(), nullable=False,
                                      server_default='0'))
        batch_op.add_column(sa.Column('deduplicated_count', sa.Integer(), nullable=False,
                                      server_default='0'))
    with op.batch_alter_table('items', schema=None) as batch_op:
        batch_op.add_column(sa.Column('duplicate_of', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('samples', sa.JSON(), nullable=True))
    op.create_table('schedules',
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('trigger_kind', sa.String(length=8), nullable=False),
    sa.Column('trigger', sa.String(length=200), nullable=False),
    sa.Column('seed_base', sa.BigInteger(), nullable=False),
    sa.Column('same_seeds', sa.Boolean(), nullable=False),
    sa.Column('overlap', sa.Boolean(), nullable=False),
    sa.Column('paused', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('next_run_at', sa.Float(), nullable=False),
    sa.Column('last_run_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('schedule_runs',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('schedule', sa.String(length=200), nullable=False),
    sa.Column('due_at', sa.Float(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('job_id', sa.String(length=64), nullable=True),
    sa.Column('seed_base', sa.BigInteger(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['schedule'], ['schedules.name'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('schedule', 'due_at', name='uq_schedule_runs_due')
    )
    with op.batch_alter_table('schedule_runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_schedule_runs_schedule'), ['schedule'],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table('schedule_runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_schedule_runs_schedule'))
    op.drop_table('schedule_runs')
    op.drop_table('schedules')
    with op.batch_alter_table('items', schema=None) as batch_op:
        batch_op.drop_column('samples')
        batch_op.drop_column('duplicate_of')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('deduplicated_count')
        batch_op.drop_column('seed_base')
