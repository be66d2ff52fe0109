"""The settings of the workers' layer, read from the environment once per process: the
broker every process that publishes or takes a permit connects to. The Celery app is
made from them when `dinfer_workers.celery_app` is imported, before any caller could hand them
over, so they live here, the lowest layer that needs them, and the service's settings
(dinfer_batch/config.py) read them from here (docs/adr/031-one-settings-object.md)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class BrokerSettings:
    url: str  # DINFER_BATCH_BROKER_URL
    visibility_timeout: int  # DINFER_BATCH_VISIBILITY_TIMEOUT, seconds


@functools.cache
def broker_settings() -> BrokerSettings:
    return BrokerSettings(
        url=os.environ.get("DINFER_BATCH_BROKER_URL", "redis://localhost:6379/0"),
        visibility_timeout=int(os.environ.get("DINFER_BATCH_VISIBILITY_TIMEOUT", "3600")))
