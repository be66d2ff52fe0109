"""entitlements per API key; chunks carry their cost

`api_keys` gains the key owner's entitlements (jobs/intake/entitlements.py): the highest
priority it may ask for, the largest chunk size, the most generated tokens one request
may ask for (max_tokens x n) and the most lines in one batch; NULL takes the service's
default. `chunks.cost` is what fair share charges and quotas count for a chunk: its
generations (lines x n); NULL (chunks made before) counts its size.

Revision ID: 0012
Revises: 0009 (the head after 0011_dashboard_indexes)
Create Date: 2026-12-01 16:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0009'
branch_labels = None
depends_on = None

KEY_COLUMNS = ('max_priority', 'max_chunk_size', 'max_request_tokens', 'max_batch_requests')


def upgrade() -> None:
    with op.batch_alter_table('api_keys') as batch:
        for name in KEY_COLUMNS:
            batch.add_column(sa.Column(name, sa.BigInteger(), nullable=True))
    with op.batch_alter_table('chunks') as batch:
        batch.add_column(sa.Column('cost', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('chunks') as batch:
        batch.drop_column('cost')
    with op.batch_alter_table('api_keys') as batch:
        for name in reversed(KEY_COLUMNS):
            batch.drop_column(name)
