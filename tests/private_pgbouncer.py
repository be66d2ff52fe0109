"""A PgBouncer of the test's own in transaction pooling (Debian's `pgbouncer`), in front of
a PostgreSQL server (tests/private_postgres.py), on a free port; the test may stop and
start it. Its configuration is the one docs/fleet.md asks of a fleet's PgBouncer."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from tests.private_postgres import free_port

FILES = 16384  # client connections and then some
CONFIG = """\
[databases]
* = host=127.0.0.1 port={server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {home}/users.txt
admin_users = postgres
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 5000
listen_backlog = 4096
query_wait_timeout = {query_wait_s}
server_login_retry = 1
ignore_startup_parameters = extra_float_digits
logfile = {home}/pgbouncer.log
"""


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer") or next(
        (path for path in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(path)),
        None)


@dataclass
class PrivatePgBouncer:
    home: Path
    port: int
    server_port: int
    process: subprocess.Popen[bytes] | None = field(default=None)

    @classmethod
    def create(cls, server_port: int, pool_size: int = 20,
               query_wait_s: int = 20) -> PrivatePgBouncer:
        if pgbouncer_binary() is None:
            raise RuntimeError("no pgbouncer: apt-get install pgbouncer (.ci/run does)")
        home = Path(tempfile.mkdtemp(prefix="dinfer-pgbouncer-"))
        bouncer = cls(home, free_port(), server_port)
        (home / "users.txt").write_text('"postgres" ""\n')
        (home / "pgbouncer.ini").write_text(CONFIG.format(
            server_port=server_port, port=bouncer.port, home=home, pool_size=pool_size,
            query_wait_s=query_wait_s))
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            shutil.chown(home, "postgres", "postgres")
            for path in home.iterdir():
                shutil.chown(path, "postgres", "postgres")
        return bouncer

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        # a client connection is a file: runuser's session opens 1,024 files at most, so a
        # thousand clients need the soft limit raised (to the hard one, at most FILES)
        command = f'ulimit -n "$(ulimit -Hn)" 2>/dev/null; ulimit -n {FILES} 2>/dev/null; ' \
                  'exec "$0" "$1"'
        self.process = subprocess.Popen([*owner, "sh", "-c", command, str(pgbouncer_binary()),
                                         str(self.home / "pgbouncer.ini")],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not start: {self.log()[-2000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        """An immediate shutdown (SIGTERM): client connections are cut off, mid-transaction
        or not."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)
        self.process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)

    def show(self, what: str) -> list[dict[str, object]]:
        """`SHOW what` on PgBouncer's admin console (POOLS, SERVERS, CLIENTS...)."""
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                             dbname="pgbouncer", autocommit=True, connect_timeout=30,
                             cursor_factory=psycopg.ClientCursor) as admin:
            cursor = admin.execute(f"SHOW {what}")
            names = [column.name for column in cursor.description or []]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def log(self) -> str:
        path = self.home / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _answers(self) -> bool:
        try:
            self.show("VERSION")
        except psycopg.OperationalError:
            return False
        return True
