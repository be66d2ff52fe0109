"""A `dinfer-batch api` process for benchmarks that talk to the service over HTTP: keys
made with the CLI, the server on a free port, ready once `/healthz` answers. `root` is the
tree whose code runs (this one, or a baseline commit unpacked by baseline.unpack)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx


def create_key(root: Path, env: dict[str, str], owner: str, *flags: str) -> str:
    """A new API key for `owner` (`keys create OWNER FLAGS...`), as the CLI prints it."""
    return subprocess.run(
        [sys.executable, "-m", "dinfer_batch", "keys", "create", owner, *flags], env=env,
        cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def start_api(root: Path, env: dict[str, str], wait_s: float = 240.0
              ) -> tuple[subprocess.Popen, str]:
    """The server process and its base URL, once it answers `/healthz` (a loaded machine
    starts a server slowly: minutes when a training run has both cores)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "dinfer_batch", "api", "--port", str(port)], env=env,
        cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise RuntimeError(f"the server of {root} did not start")
        time.sleep(0.2)
