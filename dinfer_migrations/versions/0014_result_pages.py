"""result pages: byte sizes and digests of each page of an ended job's result files

Ranged (`Range: bytes=`) and resumed downloads of result files, and their Content-Length
and ETag, come from these rows: a download from byte N reads only the items of the page
holding N onward (ADR 022).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 16:50:00
"""

import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'result_pages',
        sa.Column('job_id', sa.String(length=64), nullable=False),
        sa.Column('version', sa.String(length=128), nullable=False),
        sa.Column('page', sa.Integer(), nullable=False),
        sa.Column('all_bytes', sa.BigInteger(), nullable=False),
        sa.Column('output_bytes', sa.BigInteger(), nullable=False),
        sa.Column('errors_bytes', sa.BigInteger(), nullable=False),
        sa.Column('all_sha256', sa.String(length=64), nullable=False),
        sa.Column('output_sha256', sa.String(length=64), nullable=False),
        sa.Column('errors_sha256', sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint('job_id', 'version', 'page'),
    )


def downgrade() -> None:
    op.drop_table('result_pages')
