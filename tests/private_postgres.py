"""A PostgreSQL server of the test's own (initdb into a temporary directory, a free port),
for tests that stop and start the database; the shared server is never touched."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class PrivatePostgres:
    bin_dir: Path
    data: Path
    port: int

    @classmethod
    def create(cls) -> PrivatePostgres:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        initdb = shutil.which("initdb") or (found[-1] if found else None)
        if initdb is None:
            raise RuntimeError("no initdb: install the PostgreSQL server binaries")
        home = Path(tempfile.mkdtemp(prefix="dinfer-pg-"))
        server = cls(Path(initdb).parent, home / "data", free_port())
        if os.geteuid() == 0:  # the server refuses to run as root
            shutil.chown(home, "postgres", "postgres")
        server._as_owner("initdb", "-D", str(server.data), "-U", "postgres", "--auth=trust",
                         "-E", "UTF8", "--no-sync")
        return server

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c synchronous_commit=off")
        self._as_owner("pg_ctl", "-D", str(self.data), "-l", str(self.data / "server.log"),
                       "-o", options, "-w", "start")

    def stop(self) -> None:
        """A fast shutdown: open sessions are cut off mid-transaction."""
        self._as_owner("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        subprocess.run(self._command("pg_ctl", "-D", str(self.data), "-m", "immediate",
                                     "stop"), capture_output=True)
        shutil.rmtree(self.data.parent, ignore_errors=True)

    def _command(self, program: str, *args: str) -> list[str]:
        owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        return [*owner, str(self.bin_dir / program), *args]

    def _as_owner(self, program: str, *args: str) -> None:
        subprocess.run(self._command(program, *args), check=True, capture_output=True,
                       timeout=60)
