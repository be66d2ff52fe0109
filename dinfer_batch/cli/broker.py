"""The broker of a command that publishes permits or counts them (submit, retry, queues,
`schedule run`, beat): made from the settings the group read as the command line started
(cli/app.py), handed down, and closed when the command ends (docs/adr/051)."""

from __future__ import annotations

import click

from dinfer_batch.config import Settings
from dinfer_workers.broker import Broker


def open_broker(config: Settings) -> Broker:
    """A broker on `config`'s URL and visibility timeout, for the running command only."""
    return click.get_current_context().with_resource(
        Broker(config.broker_url, config.visibility_timeout))
