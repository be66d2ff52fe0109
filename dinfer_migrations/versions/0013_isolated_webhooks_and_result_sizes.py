"""webhook endpoints claimed one delivery at a time; result file sizes on the job row

`webhook_endpoints.claimed_until`: a sender holds an endpoint while it sends to it (a
conditional UPDATE, as deliveries are claimed), so at most one delivery per endpoint is
in flight across every beat process, and a slow endpoint holds one sender thread, not
all of them. The index finds an endpoint's due deliveries without reading its history.
`jobs.output_bytes` / `jobs.error_bytes`: the sizes of an ended job's two result files,
measured once when it ends, so `GET /v1/files/{id}` never reads a file to count it.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 16:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('webhook_endpoints', sa.Column('claimed_until', sa.Float(), nullable=True))
    op.create_index('ix_webhook_deliveries_endpoint_due', 'webhook_deliveries',
                    ['endpoint_id', 'status', 'next_attempt_at'], unique=False)
    op.add_column('jobs', sa.Column('output_bytes', sa.BigInteger(), nullable=True))
    op.add_column('jobs', sa.Column('error_bytes', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.drop_column('error_bytes')
        batch.drop_column('output_bytes')
    op.drop_index('ix_webhook_deliveries_endpoint_due', table_name='webhook_deliveries')
    with op.batch_alter_table('webhook_endpoints') as batch:
        batch.drop_column('claimed_until')
