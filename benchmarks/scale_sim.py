"""Scale simulation: many worker processes with the stand-in engine (each chunk takes a
modelled engine time, `--engine-seconds`) against one Redis and one PostgreSQL, ramped up
step by step. For each step, one job of `--chunks-per-worker` chunks per worker, and:

- chunks/s and items/s sustained (the job's own in_progress -> completed time), against
  the ideal (workers x chunk size / engine seconds);
- Redis commands and PostgreSQL transactions per item (server counters), and the CPU
  that Redis, PostgreSQL and the workers' service code spend per item (from /proc).

Redis and PostgreSQL are private instances started here (clean counters, their own CPU);
PostgreSQL through initdb/pg_ctl, as the `postgres` user when run as root. Prints JSON.

`--pgbouncer`: the workers and the CLI reach PostgreSQL through a private PgBouncer in
transaction pooling (tests/private_pgbouncer.py, `--pgbouncer-pool` server connections),
as docs/fleet.md's fleet does. `--virtual`: the ramp's workers are virtual workers,
`--per-process` of them to a process (benchmarks/virtual_fleet.py: each its own
connection pool, claim loop, result writes, heartbeat and reaper threads), so that a
1,000-worker fleet's database and Redis load fits one machine. Each step then also
reports the p99 claim latency, the most server connections held while the job ran, and
the database errors the workers logged; `saturates_at` is the first step under 90 % of
the ideal. `--code DIR` runs the workers on another checkout's service code (a previous
commit's worktree), this script's own measuring; the workers and the CLI run in the
fleet's temporary folder, as `python -m` would import the service from the folder it is
started in first (a checkout's own, whatever `--code` said). The workers run at `nice`
10, so that the shared servers, which a fleet runs on machines of their own, get the
CPUs first.

    python benchmarks/scale_sim.py                       # ramp 8,16,32,64 workers
    python benchmarks/scale_sim.py --workers 4,8 --engine-seconds 0.5
    python benchmarks/scale_sim.py --virtual --pgbouncer --workers 100,250,500,1000 \
        --chunk-size 16 --chunks-per-worker 1 --engine-seconds 60
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.* (the private server, the stand-in engine)

import psycopg  # noqa: E402
import redis  # noqa: E402
from service_bench import proc_kib  # noqa: E402  (same folder: run as a script)

from tests.private_pgbouncer import PrivatePgBouncer  # noqa: E402
from tests.private_postgres import PrivatePostgres, free_port  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
IDLE_WINDOW_S = 5.0
# the workers yield the CPUs to the shared servers (PostgreSQL, PgBouncer, Redis), which a
# fleet runs on machines of their own: here all share 2 CPUs, and a PgBouncer starved by
# a thousand workers' Python holds every client up, however idle the database
WORKERS_NICE = 10


def cpu_seconds(pid: int, reaped_children: bool = False) -> float:
    """User + system CPU of a process (and of its children that have ended)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    used = int(fields[11]) + int(fields[12])
    if reaped_children:
        used += int(fields[13]) + int(fields[14])
    return used / TICK


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError):
                continue
    return found


def tree_cpu(pid: int) -> float:
    """A server's CPU: itself, its live children and the children it has reaped."""
    total = cpu_seconds(pid, reaped_children=True)
    for child in children(pid):
        try:
            total += cpu_seconds(child)
        except OSError:
            continue
    return total


def rss_mib(pid: int) -> float:
    return (proc_kib(pid, "status", "VmRSS") or 0) / 1024


class Fleet:
    """The private servers and the worker processes (virtual workers' processes with
    `--virtual`)."""

    def __init__(self, tmp: Path, engine_seconds: float, args: argparse.Namespace) -> None:
        self.tmp, self.args = tmp, args
        self.count = 0  # workers (virtual ones with --virtual)
        self.redis_port = free_port()
        self.redis = subprocess.Popen(
            ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
        self.postgres = PrivatePostgres.create()
        self.postgres.start()
        self.bouncer: PrivatePgBouncer | None = None
        if args.pgbouncer:
            # as docker/pgbouncer/pgbouncer.ini: a fleet starting at once queues for a while
            self.bouncer = PrivatePgBouncer.create(self.postgres.port, args.pgbouncer_pool,
                                                   query_wait_s=60)
            self.bouncer.start()
        code = args.code or REPO
        self.queue = f"sim_{uuid.uuid4().hex[:8]}"
        self.env = os.environ | {
            "DINFER_BATCH_DATABASE_URL": self.bouncer.url if self.bouncer else self.postgres.url,
            "DINFER_BATCH_BROKER_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "DINFER_BATCH_QUEUE": self.queue,
            "DINFER_BATCH_MODEL": str(REPO / "dinfer_models" / "demo"),
            "DINFER_BATCH_ENGINE": "tests.stand_in_engines:InstantEngine",
            "STAND_IN_SECONDS_PER_CALL": str(engine_seconds),
            "PYTHONPATH": f"{code}:{REPO}", "OMP_NUM_THREADS": "1"}
        self.workers: list[subprocess.Popen] = []
        self.cli("db", "upgrade", DINFER_BATCH_DATABASE_URL=self.postgres.url)  # direct
        self.broker = redis.Redis(port=self.redis_port)
        self.stats = psycopg.connect(f"host=127.0.0.1 port={self.postgres.port} "
                                     "user=postgres dbname=postgres", autocommit=True)

    def cli(self, *args: str, **env: str) -> str:
        done = subprocess.run([sys.executable, "-m", "dinfer_batch", *args], cwd=self.tmp,
                              env=self.env | env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"dinfer-batch {args[0]}: {done.stderr.strip()[-300:]}")
        return done.stdout.strip()

    def _spawn(self) -> list[str]:
        """The next process's command line; counts the workers it runs."""
        if not self.args.virtual:
            self.count += 1
            return [sys.executable, "-m", "dinfer_batch", "worker", "--queues", self.queue]
        first, self.count = self.count, min(self.count + self.args.per_process, self.target)
        return [sys.executable, str(REPO / "benchmarks" / "virtual_fleet.py"), "--first",
                str(first), "--count", str(self.count - first), "--stats",
                str(self.tmp / f"claims{len(self.workers)}.jsonl")]

    def grow_to(self, count: int) -> None:
        logs, self.target = [], count
        while self.count < count:
            log = self.tmp / f"worker{len(self.workers)}.log"
            self.workers.append(subprocess.Popen(
                self._spawn(), env=self.env, cwd=self.tmp, stdout=log.open("w"),
                stderr=subprocess.STDOUT, preexec_fn=lambda: os.nice(WORKERS_NICE)))
            logs.append(log)
        deadline = time.monotonic() + 600
        while not all("ready: " in log.read_text() for log in logs):
            if time.monotonic() > deadline or any(w.poll() is not None for w in self.workers):
                dead = [i for i, w in enumerate(self.workers) if w.poll() is not None]
                said = next((line for line in (self.tmp / f"worker{dead[0]}.log").read_text(
                    errors="replace").splitlines() if "could not start" in line),
                    "see its log") if dead else "too slow"
                raise RuntimeError(f"workers did not start ({self.count} asked): {said}")
            time.sleep(0.5)

    def counters(self) -> dict[str, float]:
        self.stats.execute("SELECT pg_stat_clear_snapshot()")
        xacts = self.stats.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = 'postgres'").fetchone()[0]
        postmaster = int((self.postgres.data / "postmaster.pid").read_text().split()[0])
        return {"redis_commands": self.broker.info("stats")["total_commands_processed"],
                "pg_xacts": xacts, "redis_cpu": cpu_seconds(self.redis.pid),
                "pg_cpu": tree_cpu(postmaster),
                "workers_cpu": sum(cpu_seconds(w.pid) for w in self.workers),
                "bouncer_cpu": tree_cpu(self.bouncer.process.pid) if self.bouncer
                and self.bouncer.process else 0.0,
                "time": time.monotonic()}

    def connections(self) -> dict[str, int]:
        """Connections the fleet holds open (this script's own one left out); through
        PgBouncer also its client connections and the clients waiting for a server."""
        backends = self.stats.execute("SELECT count(*) FROM pg_stat_activity "
                                      "WHERE datname = 'postgres'").fetchone()[0]
        held = {"pg_connections": backends - 1,
                "redis_clients": self.broker.info("clients")["connected_clients"] - 1}
        if self.bouncer is not None:
            try:
                shown = self.bouncer.show("POOLS")
            except psycopg.OperationalError:  # PgBouncer too busy to answer its console
                return held | {"pgbouncer_clients": -1, "pgbouncer_waiting": -1}
            pools = [p for p in shown if p["database"] == "postgres"]
            held["pgbouncer_clients"] = sum(int(p["cl_active"]) + int(p["cl_waiting"])
                                            for p in pools)
            held["pgbouncer_waiting"] = sum(int(p["cl_waiting"]) for p in pools)
        return held

    def claims_ms(self, since: float, until: float) -> list[float]:
        """Virtual workers' claim latencies between two unix times."""
        found = []
        for path in self.tmp.glob("claims*.jsonl"):
            for line in path.read_text().splitlines():
                when, ms = json.loads(line)
                if since <= when <= until:
                    found.append(ms)
        return sorted(found)

    def db_errors(self) -> dict[str, int]:
        """Database errors the workers logged so far: all of them, connections refused
        (PostgreSQL's max_connections) and prepared statements a pooler lost."""
        logs = "".join(log.read_text(errors="replace") for log in self.tmp.glob("worker*.log"))
        return {"db_errors_logged": logs.count("(psycopg."),
                "refused_logged": logs.count("too many clients"),
                "prepared_statement_errors_logged": logs.count("prepared statement")}

    def stop(self) -> None:
        for worker in self.workers:
            worker.terminate()
        for worker in self.workers:
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
        self.stats.close()
        if self.bouncer is not None:
            self.bouncer.remove()
        self.redis.terminate()
        self.redis.wait()
        self.postgres.remove()


def idle_costs(fleet: Fleet, idle_seconds: float) -> tuple[dict[str, float],
                                                           dict[str, float]]:
    """What the fleet costs a second with nothing to do, and the counters after it."""
    time.sleep(1.5)  # let the statistics settle
    idle_start = fleet.counters()
    time.sleep(idle_seconds)
    before = fleet.counters()
    idle = {name: (before[name] - idle_start[name]) / (before["time"] - idle_start["time"])
            for name in before}
    return idle, before


def run_job(fleet: Fleet, path: Path, chunk_size: int) -> tuple[float, float, int,
                                                                  dict[str, int]]:
    """Submit `path` and wait for its job: (in_progress_at, completed_at, polls, the most
    connections of each kind seen held while it ran, sampled every second)."""
    job_id = fleet.cli("submit", str(path), "--chunk-size", str(chunk_size))
    polls, peaks, deadline = 0, {}, time.monotonic() + fleet.args.step_timeout
    while time.monotonic() < deadline:
        polls += 1
        for name, held in fleet.connections().items():
            peaks[f"{name}_max"] = max(held, peaks.get(f"{name}_max", 0))
        status, started, ended = fleet.stats.execute(
            "SELECT status, in_progress_at, completed_at FROM jobs WHERE id = %s",
            (job_id,)).fetchone()
        if status not in ("validating", "in_progress", "finalizing"):
            break
        time.sleep(1.0)
    if status != "completed":
        raise RuntimeError(f"job {job_id} {status} after {polls} s")
    return started, ended, polls, peaks


def run_step(fleet: Fleet, workers: int, chunk_size: int, chunks: int,
             engine_seconds: float, idle_seconds: float = IDLE_WINDOW_S) -> dict[str, Any]:
    items = chunks * chunk_size
    path = fleet.tmp / f"step{workers}.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"add {i} {i}="}) + "\n"
                            for i in range(items)))
    errors_before = fleet.db_errors()
    idle, before = idle_costs(fleet, idle_seconds)
    connections = fleet.connections()
    started, ended, polls, peaks = run_job(fleet, path, chunk_size)
    time.sleep(1.5)
    after = fleet.counters()
    delta = {name: after[name] - before[name] for name in before}
    seconds = ended - started
    ideal = workers * chunk_size / engine_seconds
    pg_xacts = delta["pg_xacts"] - 3 * polls - 2  # less this script's own queries
    claims = fleet.claims_ms(started, ended)
    return {
        "workers": workers, "items": items, "chunks": chunks,
        "seconds": round(seconds, 2),
        "chunks_per_s": round(chunks / seconds, 1), "items_per_s": round(items / seconds),
        "ideal_items_per_s": round(ideal), "efficiency": round(items / seconds / ideal, 3),
        "redis_commands_per_item": round(delta["redis_commands"] / items, 3),
        "pg_transactions_per_item": round(pg_xacts / items, 3),
        "redis_cpu_ms_per_item": round(1000 * delta["redis_cpu"] / items, 4),
        "pg_cpu_ms_per_item": round(1000 * delta["pg_cpu"] / items, 4),
        "pgbouncer_cpu_ms_per_item": round(1000 * delta["bouncer_cpu"] / items, 4),
        "worker_service_cpu_ms_per_item": round(1000 * delta["workers_cpu"] / items, 4),
        "box_cpu_busy": round((delta["redis_cpu"] + delta["pg_cpu"] + delta["workers_cpu"]
                               + delta["bouncer_cpu"]) / delta["time"] / os.cpu_count(), 2),
        "worker_rss_mib": round(sum(rss_mib(w.pid) for w in fleet.workers) / workers, 1),
        "idle_redis_commands_per_worker_s": round(idle["redis_commands"] / workers, 2),
        "idle_pg_transactions_per_worker_s": round((idle["pg_xacts"] - 2 / idle_seconds)
                                                   / workers, 3),
        "idle_pg_cpu_ms_per_s": round(1000 * idle["pg_cpu"], 1),
        # what a worker costs doing nothing (Celery's and its own threads' polling): it
        # runs through the job too, so it is part of the CPU per item
        "idle_worker_cpu_ms_per_worker_s": round(1000 * idle["workers_cpu"] / workers, 2),
        "window_s": round(delta["time"], 1),
        "claims": len(claims),
        "claim_p50_ms": round(claims[len(claims) // 2], 1) if claims else None,
        "claim_p99_ms": round(claims[int(0.99 * (len(claims) - 1))], 1) if claims else None,
        **{name: count - errors_before[name] for name, count in fleet.db_errors().items()},
        **connections, **peaks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="8,16,32,64", help="the ramp, comma-separated")
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--chunks-per-worker", type=int, default=4)
    parser.add_argument("--engine-seconds", type=float, default=1.0,
                        help="modelled engine time of one chunk")
    parser.add_argument("--idle-seconds", type=float, default=IDLE_WINDOW_S,
                        help="how long the idle fleet is measured before each step (an "
                        "idle worker writes every 20 s or so: a longer window averages)")
    parser.add_argument("--pgbouncer", action="store_true",
                        help="reach PostgreSQL through a private PgBouncer (transaction pooling)")
    parser.add_argument("--pgbouncer-pool", type=int, default=20,
                        help="PgBouncer's server connections (default_pool_size)")
    parser.add_argument("--virtual", action="store_true",
                        help="virtual workers: threads in a few processes")
    parser.add_argument("--per-process", type=int, default=250,
                        help="virtual workers per process")
    parser.add_argument("--code", type=Path, help="the checkout whose service the workers run")
    parser.add_argument("--step-timeout", type=float, default=900,
                        help="seconds a step's job may take before the ramp stops")
    args = parser.parse_args()
    steps: list[dict[str, Any]] = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp_name:
        fleet = Fleet(Path(tmp_name), args.engine_seconds, args)
        try:
            for workers in (int(n) for n in args.workers.split(",")):
                try:
                    fleet.grow_to(workers)
                    steps.append(run_step(fleet, workers, args.chunk_size,
                                          workers * args.chunks_per_worker, args.engine_seconds,
                                          args.idle_seconds))
                except RuntimeError as exc:  # the ramp stops where the fleet stalls
                    steps.append({"workers": workers, "stalled": str(exc),
                                  **fleet.db_errors()})
                print(json.dumps(steps[-1]), file=sys.stderr)
                if "stalled" in steps[-1]:
                    break
        finally:
            fleet.stop()
    short = [s["workers"] for s in steps if s.get("efficiency", 0) < 0.9]
    print(json.dumps({"chunk_size": args.chunk_size, "engine_seconds": args.engine_seconds,
                      "cpus": os.cpu_count(), "idle_seconds": args.idle_seconds,
                      "virtual": args.virtual,
                      "pgbouncer": args.pgbouncer, "code": str(args.code or REPO),
                      "load_average_1m": [round(load, 1), round(os.getloadavg()[0], 1)],
                      "saturates_at": short[0] if short else None, "steps": steps}, indent=2))


if __name__ == "__main__":
    main()
