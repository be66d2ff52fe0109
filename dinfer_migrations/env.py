"""Alembic environment: runs on the connection `dinfer_batch.storage.db.upgrade` hands over, or on
`sqlalchemy.url` when Alembic is driven from its own command line."""

from alembic import context
from sqlalchemy import create_engine

from dinfer_batch.storage.tables import Base

config = context.config


def run_migrations(connection) -> None:  # noqa: ANN001
    context.configure(connection=connection, target_metadata=Base.metadata,
                      render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run_migrations(connection)
else:
    with create_engine(config.get_main_option("sqlalchemy.url")).begin() as own_connection:
        run_migrations(own_connection)
