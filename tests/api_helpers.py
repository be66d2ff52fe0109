"""Helpers for the HTTP API tests: a real `dinfer-batch api` server (uvicorn) on 127.0.0.1
and a free port, on an isolated service of tests.service_fixtures, with API keys of two
owners (alice, bob) and an admin key (owner admin)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx
from openai import OpenAI

from tests.service_helpers import Service, wait_for


@dataclass
class Api:
    service: Service
    url: str
    process: subprocess.Popen
    log: Path
    keys: dict[str, str]  # owner -> secret; the key's name is f"{owner}-{port}"

    def client(self, owner: str = "alice") -> OpenAI:
        """The official client, unchanged: only base_url and api_key."""
        return OpenAI(base_url=f"{self.url}/v1", api_key=self.keys[owner], max_retries=0)

    def http(self, owner: str | None = "alice") -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.keys[owner]}"} if owner else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_api(service: Service, tmp_path: Path, **extra_env: str) -> Api:
    port = free_port()
    keys = {}
    for owner in ("alice", "bob", "admin"):
        created = service.cli("keys", "create", f"{owner}-{port}", "--owner", owner,
                              *(["--admin"] if owner == "admin" else []))
        assert created.exit_code == 0, created.output
        keys[owner] = created.output.strip()
    log = tmp_path / "api.log"
    env = os.environ | service.env | {"DINFER_BATCH_FILES_DIR": str(tmp_path / "files")}
    process = subprocess.Popen(
        [sys.executable, "-m", "dinfer_batch", "api", "--port", str(port)],
        env=env | extra_env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert process.poll() is None, log.read_text()
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(up, 60)
    return Api(service, url, process, log, keys)


def stop_api(api: Api) -> None:
    api.process.terminate()
    try:
        api.process.wait(20)
    except subprocess.TimeoutExpired:
        api.process.kill()
