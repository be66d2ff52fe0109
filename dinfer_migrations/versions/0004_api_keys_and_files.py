"""api keys, uploaded files, job owners and completion windows, item logprobs

Revision ID: 0004
Revises: 0002
Create Date: 2026-11-30 11:40:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('api_keys',
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('owner', sa.String(length=200), nullable=False),
    sa.Column('secret_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('revoked_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('name'),
    sa.UniqueConstraint('secret_hash')
    )
    op.create_table('files',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('owner', sa.String(length=200), nullable=False),
    sa.Column('filename', sa.Text(), nullable=False),
    sa.Column('purpose', sa.String(length=32), nullable=False),
    sa.Column('bytes', sa.BigInteger(), nullable=False),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.create_index('ix_files_owner_created', ['owner', 'created_at'], unique=False)

    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('owner', sa.String(length=200), nullable=False,
                                      server_default='local'))
        batch_op.add_column(sa.Column('endpoint', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('input_file_id', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('completion_window', sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column('expires_at', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('expired_at', sa.Float(), nullable=True))
        batch_op.create_index(batch_op.f('ix_jobs_owner'), ['owner'], unique=False)
    with op.batch_alter_table('items', schema=None) as batch_op:
        batch_op.add_column(sa.Column('logprobs', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('items', schema=None) as batch_op:
        batch_op.drop_column('logprobs')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_jobs_owner'))
        for column in ('expired_at', 'expires_at', 'completion_window', 'input_file_id',
                       'endpoint', 'owner'):
            batch_op.drop_column(column)
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.drop_index('ix_files_owner_created')
    op.drop_table('files')
    op.drop_table('api_keys')
