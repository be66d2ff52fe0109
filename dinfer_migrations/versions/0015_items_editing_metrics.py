"""items: tokens the editing decoder rewrote, and its post-step forwards

The "editing" decoder (LLaDA2.1's token editing, ADR 021) reports per request how many
tokens it rewrote after placing them and how many forwards it ran over blocks with no
mask left; a line's metrics show them beside nfe. NULL for the other decoders (and every
item written before this revision).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01 17:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('items') as batch:
        batch.add_column(sa.Column('edited_tokens', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('post_steps', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('items') as batch:
        batch.drop_column('post_steps')
        batch.drop_column('edited_tokens')
