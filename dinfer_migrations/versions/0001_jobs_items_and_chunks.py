"""jobs, items and chunks

Revision ID: 0001
Revises: 
Create Date: 2026-11-30 05:29:23.412703
"""

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    _create_jobs()
    _create_chunks()
    _create_items()


def _create_jobs() -> None:
    op.create_table('jobs',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('model', sa.Text(), nullable=False),
    sa.Column('queue', sa.String(length=200), nullable=False),
    sa.Column('input_file', sa.Text(), nullable=False),
    sa.Column('params', sa.JSON(), nullable=False),
    sa.Column('metadata', sa.JSON(), nullable=False),
    sa.Column('chunk_size', sa.Integer(), nullable=False),
    sa.Column('chunk_count', sa.Integer(), nullable=False),
    sa.Column('retries', sa.Integer(), nullable=False),
    sa.Column('total_count', sa.Integer(), nullable=False),
    sa.Column('completed_count', sa.Integer(), nullable=False),
    sa.Column('failed_count', sa.Integer(), nullable=False),
    sa.Column('prompt_tokens', sa.BigInteger(), nullable=False),
    sa.Column('completion_tokens', sa.BigInteger(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('in_progress_at', sa.Float(), nullable=True),
    sa.Column('finalizing_at', sa.Float(), nullable=True),
    sa.Column('completed_at', sa.Float(), nullable=True),
    sa.Column('failed_at', sa.Float(), nullable=True),
    sa.Column('cancelling_at', sa.Float(), nullable=True),
    sa.Column('cancelled_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_jobs_status'), ['status'], unique=False)


def _create_chunks() -> None:
    op.create_table('chunks',
    sa.Column('job_id', sa.String(length=64), nullable=False),
    sa.Column('chunk_id', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('size', sa.Integer(), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('worker', sa.Text(), nullable=True),
    sa.Column('device', sa.String(length=64), nullable=True),
    sa.Column('batch_sizes', sa.JSON(), nullable=True),
    sa.Column('prompt_tokens', sa.BigInteger(), nullable=False),
    sa.Column('completion_tokens', sa.BigInteger(), nullable=False),
    sa.Column('forwards', sa.BigInteger(), nullable=False),
    sa.Column('seconds', sa.Float(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=True),
    sa.Column('finished_at', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ),
    sa.PrimaryKeyConstraint('job_id', 'chunk_id')
    )


def _create_items() -> None:
    op.create_table('items',
    sa.Column('job_id', sa.String(length=64), nullable=False),
    sa.Column('line', sa.Integer(), nullable=False),
    sa.Column('custom_id', sa.Text(), nullable=True),
    sa.Column('chunk_id', sa.Integer(), nullable=True),
    sa.Column('request', sa.JSON(), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('output_text', sa.Text(), nullable=True),
    sa.Column('finish_reason', sa.String(length=16), nullable=True),
    sa.Column('prompt_tokens', sa.Integer(), nullable=True),
    sa.Column('completion_tokens', sa.Integer(), nullable=True),
    sa.Column('nfe', sa.Integer(), nullable=True),
    sa.Column('latency_s', sa.Float(), nullable=True),
    sa.Column('error_code', sa.String(length=64), nullable=True),
    sa.Column('error_message', sa.Text(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('finished_at', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ),
    sa.PrimaryKeyConstraint('job_id', 'line'),
    sa.UniqueConstraint('job_id', 'custom_id', name='uq_items_job_custom_id')
    )
    with op.batch_alter_table('items', schema=None) as batch_op:
        batch_op.create_index('ix_items_job_chunk', ['job_id', 'chunk_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('items', schema=None) as batch_op:
        batch_op.drop_index('ix_items_job_chunk')

    op.drop_table('items')
    op.drop_table('chunks')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_jobs_status'))

    op.drop_table('jobs')
