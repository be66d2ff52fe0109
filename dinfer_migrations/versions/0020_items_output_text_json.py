"""items.output_text on PostgreSQL: a json string, so that an answer with a NUL is kept

A model's answer may hold a NUL (a byte-fallback token such as LLaDA's <0x00> decodes to
one); PostgreSQL's text type refuses it, its json type keeps the escape \\u0000 (ADR 053).
Each stored answer becomes the JSON string of the same text. SQLite's text holds a NUL:
nothing changes there. A downgrade fails on an answer that holds a NUL, which text cannot.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 07:45:00
"""

from alembic import op

revision = '0020'
down_revision = '0019'
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute("ALTER TABLE items ALTER COLUMN output_text TYPE json "
                   "USING to_json(output_text)")


def downgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute("ALTER TABLE items ALTER COLUMN output_text TYPE text "
                   "USING output_text #>> '{}'")
