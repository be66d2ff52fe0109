"""webhook endpoints, events, deliveries and attempts; file and output expiry, purged jobs

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-01 07:10:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('webhook_endpoints',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('owner', sa.String(length=200), nullable=False),
    sa.Column('url', sa.Text(), nullable=False),
    sa.Column('events', sa.Text(), nullable=False),
    sa.Column('secret', sa.String(length=100), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_webhook_endpoints_owner', 'webhook_endpoints', ['owner'])
    op.create_table('webhook_events',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('type', sa.String(length=32), nullable=False),
    sa.Column('job_id', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_webhook_events_job_id', 'webhook_events', ['job_id'])
    op.create_table('webhook_deliveries',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('event_id', sa.String(length=64), nullable=False),
    sa.Column('endpoint_id', sa.String(length=64), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('next_attempt_at', sa.Float(), nullable=False),
    sa.Column('last_status_code', sa.Integer(), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('delivered_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('event_id', 'endpoint_id', name='uq_webhook_deliveries_event')
    )
    op.create_index('ix_webhook_deliveries_due', 'webhook_deliveries',
                    ['status', 'next_attempt_at'])
    op.create_index('ix_webhook_deliveries_endpoint_id', 'webhook_deliveries', ['endpoint_id'])
    op.create_table('webhook_attempts',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('delivery_id', sa.Integer(), nullable=False),
    sa.Column('attempted_at', sa.Float(), nullable=False),
    sa.Column('status_code', sa.Integer(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('seconds', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_webhook_attempts_delivery_id', 'webhook_attempts', ['delivery_id'])
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('output_expires_after', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('purged_at', sa.Float(), nullable=True))
        batch_op.create_index('ix_jobs_purged_at', ['purged_at'], unique=False)
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.add_column(sa.Column('expires_at', sa.Float(), nullable=True))
        batch_op.create_index('ix_files_expires_at', ['expires_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.drop_index('ix_files_expires_at')
        batch_op.drop_column('expires_at')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_purged_at')
        batch_op.drop_column('purged_at')
        batch_op.drop_column('output_expires_after')
    for table in ('webhook_attempts', 'webhook_deliveries', 'webhook_events',
                  'webhook_endpoints'):
        op.drop_table(table)
