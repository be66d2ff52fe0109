"""How fast retention deletes, printed as one JSON object: `dinfer-batch submit` of a
mixed file (200,000 lines by default), every item answered straight in SQL (as in
submit_bench), then `dinfer-batch delete JOB` timed: requests and results deleted per
second, in transactions of PURGE_ROWS lines, and the process's peak RSS. Beat's
retention pass runs the same purge. The job's submit is timed too, for scale (the pace
at which a fleet can fill the items table, which retention must be able to keep up with).

    python benchmarks/retention_bench.py                # SQLite in a temporary directory
    createdb -h 127.0.0.1 -U postgres dinfer_bench
    python benchmarks/retention_bench.py \\
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/dinfer_bench
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import redis
from service_bench import REPO, bench_service, timed_cli  # same folder: run as a script
from sqlalchemy import func, select
from submit_bench import answer_everything, rates, write_mixed

from dinfer_batch.jobs.retention import PURGE_ROWS
from dinfer_batch.storage import db
from dinfer_batch.storage.tables import Item


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--database-url", help="default: SQLite in a temporary directory")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        service = bench_service(tmp, REPO / "dinfer_models" / "demo", args.database_url,
                                args.broker_url)
        env = service.env
        url = env["DINFER_BATCH_DATABASE_URL"]
        path = write_mixed(tmp / "mixed.jsonl", args.lines)
        try:
            job_id, submit = timed_cli(env, "submit", str(path))
        finally:
            redis.Redis.from_url(args.broker_url).delete(service.queue)  # no worker runs it
        answer_everything(url, job_id)
        _, delete = timed_cli(env, "delete", job_id)
        with db.sessions(url)() as session:
            left = session.scalar(select(func.count()).select_from(Item)
                                  .where(Item.job_id == job_id))
        figures = {"database": url.split(":")[0], "lines": args.lines,
                   "rows_per_transaction": PURGE_ROWS, "items_left": left,
                   "submit": rates(args.lines, submit), "delete": rates(args.lines, delete)}
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
