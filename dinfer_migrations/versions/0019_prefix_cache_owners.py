"""jobs.cached_tokens, api_keys.shared_cache_salt: the prefix cache kept apart by owner

A job counts the prompt tokens its lines got from a worker's prefix cache (its usage's
cached_tokens); a key may carry an administrator's grant to share cached prompt blocks
with other owners granted the same name (ADR 040). Jobs made before count 0; keys made
before share with no one.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05 04:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs') as batch:
        batch.add_column(sa.Column('cached_tokens', sa.BigInteger(), nullable=False,
                                   server_default='0'))
    with op.batch_alter_table('api_keys') as batch:
        batch.add_column(sa.Column('shared_cache_salt', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('api_keys') as batch:
        batch.drop_column('shared_cache_salt')
    with op.batch_alter_table('jobs') as batch:
        batch.drop_column('cached_tokens')
