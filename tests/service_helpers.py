"""Helpers for the service tests: a Service (an isolated environment with its CLI,
database and `dinfer-batch worker` subprocesses), polling, JSONL files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from dinfer_batch.cli import main
from dinfer_batch.config import Settings
from dinfer_batch.jobs.expiry import get_job
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Job
from dinfer_batch.webhooks.sender import Sender
from dinfer_workers.broker import Broker

# the Redis the integration tests use (their own queue names on it)
REDIS_URL = os.environ.get("DINFER_BATCH_TEST_REDIS", "redis://127.0.0.1:6379/0")


@dataclass
class Service:
    """One isolated service: its environment, and helpers to drive it."""

    env: dict[str, str]
    queue: str
    model: Path
    workers: list[subprocess.Popen] = field(default_factory=list)

    def cli(self, *args: str | Path) -> Result:
        return CliRunner().invoke(main, [str(a) for a in args], env=self.env)

    def sessions(self) -> Any:
        return db.ready(self.env["DINFER_BATCH_DATABASE_URL"])

    def job(self, job_id: str) -> Job:
        return get_job(self.sessions(), job_id)

    def start_node(self, log: Path, *args: str, **extra_env: str) -> subprocess.Popen:
        """A real `dinfer-batch worker ARGS` process (one worker, or a node's supervisor
        with --replicas/--gpus) on this service's queue; returns at once."""
        process = subprocess.Popen(
            [sys.executable, "-m", "dinfer_batch", "worker", "--model", str(self.model),
             "--queues", self.queue, *args],
            env=os.environ | self.env | extra_env, stdout=log.open("w"),
            stderr=subprocess.STDOUT)
        self.workers.append(process)  # SIGTERMed by stop_workers
        return process

    def start_worker(self, log: Path, **extra_env: str) -> subprocess.Popen:
        """A real `dinfer-batch worker` process; returns once it consumes the queue."""
        process = self.start_node(log, **extra_env)
        wait_for(lambda: "ready: " in log.read_text() or process.poll() is not None, 120)
        assert process.poll() is None, log.read_text()
        return process

    def wait_job(self, job_id: str, until: Callable[[Job], bool], timeout: float = 120) -> Job:
        wait_for(lambda: until(self.job(job_id)), timeout)
        return self.job(job_id)

    def stop_workers(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.workers:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def wait_for(condition: Callable[[], bool], timeout: float, poll: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout}s")
        time.sleep(poll)


def write_jsonl(path: Path, lines: list[Any]) -> Path:
    """Dicts become JSON lines; strings are written as they are (to make bad lines)."""
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


REPO_ROOT_EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def env_settings() -> Settings:
    """The settings of the test's environment now, as a process's entry reads them."""
    return Settings.from_env(os.environ)


def env_broker() -> Broker:
    """A broker on the test environment's settings, as an entry makes one (a context
    manager: its connections are closed at the end)."""
    config = env_settings()
    return Broker(config.broker_url, config.visibility_timeout)


def webhook_sender(sessions: Any) -> Sender:
    """A sender on the webhook settings of the test's environment, as beat makes one."""
    config = env_settings()
    return Sender(sessions, config.webhook_timeout, config.webhook_retry_seconds)
