"""Regenerate the dashboard screenshots in docs/img/ (shown in docs/dashboard.md): a real
`dinfer-batch api` on a fresh SQLite database, two CPU worker replicas with a paced
stand-in engine on the local Redis, a few jobs of two owners (one with invalid lines, one
cancelled), a schedule; then headless Chromium signs in with an admin key and captures
the jobs list (laptop and phone widths), a running job's page and the fleet.

    python scripts/dashboard_screenshots.py            # needs Redis and /usr/bin/chromium
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import redis  # noqa: E402

from tests.api_helpers import start_api, stop_api  # noqa: E402
from tests.browser import chromium  # noqa: E402
from tests.service_helpers import REDIS_URL, Service, wait_for, write_jsonl  # noqa: E402
from tests.tiny_model import write_tiny_checkpoint  # noqa: E402

OUT = REPO / "docs" / "img"
PACED = {"DINFER_BATCH_ENGINE": "tests.stand_in_engines:InstantEngine",
         "STAND_IN_SECONDS_PER_CALL": "1.5"}


def submit(api, owner: str, scratch: Path, name: str, lines: int, bad: int = 0,  # noqa: ANN001
           chunk: int = 8) -> str:
    rows: list = [{"custom_id": f"{name}-{i}", "prompt": f"add {i} {i % 7}="}
                  for i in range(lines)]
    for i in range(bad):
        rows[3 + 5 * i] = {"custom_id": f"{name}-bad-{i}", "prompt": 42}
    path = write_jsonl(scratch / f"{name}.jsonl", rows)
    client = api.client(owner)
    file = client.files.create(file=path.open("rb"), purpose="batch")
    return client.batches.create(
        input_file_id=file.id, endpoint="/v1/completions", completion_window="24h",
        metadata={"name": name, "team": owner},
        extra_body={"chunk_size": chunk, "max_tokens": 8, "block_length": 8}).id


def shoot(driver, url: str, target: Path, width: int = 1280) -> None:  # noqa: ANN001
    driver.set_window_size(width, 900)
    driver.get(url)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(max(height + 20, 600), 2400))
    time.sleep(0.3)
    driver.save_screenshot(str(target))
    print(f"wrote {target.relative_to(REPO)}")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as name:
        scratch = Path(name)
        model = write_tiny_checkpoint(scratch / "LLaDA-tiny")
        queue = f"shots_{uuid.uuid4().hex[:8]}"
        service = Service(env={"DINFER_BATCH_DATABASE_URL": f"sqlite:///{scratch}/db.sqlite",
                               "DINFER_BATCH_BROKER_URL": REDIS_URL,
                               "DINFER_BATCH_QUEUE": queue, "DINFER_BATCH_MODEL": str(model),
                               "OMP_NUM_THREADS": "1"}, queue=queue, model=model)
        api = start_api(service, scratch)
        driver = chromium(scratch)
        try:
            done = submit(api, "alice", scratch, "warmup-eval", 24, chunk=24)
            service.start_node(scratch / "workers.log", "--replicas", "2", "--device", "cpu",
                               **PACED)
            service.wait_job(done, lambda job: job.status == "completed", 180)
            running = submit(api, "alice", scratch, "nightly-math", 400, bad=3)
            submit(api, "bob", scratch, "translation-fr", 300, bad=1)
            cancelled = submit(api, "bob", scratch, "ablation-7", 200)
            submit(api, "alice", scratch, "long-context", 600)
            write_jsonl(scratch / "nightly.jsonl", [{"prompt": "add 1 2="}])
            service.cli("schedule", "add", "nightly-eval", scratch / "nightly.jsonl",
                        "--every", "6h", "--model", model, "--max-tokens", "8",
                        "--block-length", "8")
            service.wait_job(running, lambda job: job.completed_count >= 120, 300)
            assert service.cli("cancel", cancelled).exit_code == 0
            driver.get(f"{api.url}/signin")
            driver.find_element("id", "key").send_keys(api.keys["admin"])
            driver.find_element("css selector", ".signin button").click()
            wait_for(lambda: driver.current_url == f"{api.url}/", 10)
            shoot(driver, f"{api.url}/", OUT / "dashboard-jobs.png")
            shoot(driver, f"{api.url}/", OUT / "dashboard-jobs-phone.png", width=390)
            shoot(driver, f"{api.url}/jobs/{running}", OUT / "dashboard-job.png")
            shoot(driver, f"{api.url}/fleet", OUT / "dashboard-fleet.png")
        finally:
            driver.quit()
            service.stop_workers()
            stop_api(api)
            redis.Redis.from_url(REDIS_URL).delete(queue)


if __name__ == "__main__":
    main()
