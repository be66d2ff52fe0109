"""The web dashboard in a real headless Chromium, against a real `dinfer-batch api` server,
a real worker (a paced stand-in engine, so that a job runs long enough to watch) on Redis
and the database: sign in, a running job's bar moves with no reload, its page shows a
failed request's message, a job is cancelled through the confirmation form and its output
file downloaded; another owner's job answers 404; no page names a server path or secret."""

import json

import httpx2 as httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from sqlalchemy import select

from dinfer_batch.dashboard.access import COOKIE
from dinfer_batch.storage.tables import Item
from tests.browser import CHROMIUM, chromium
from tests.service_helpers import wait_for, write_jsonl

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not CHROMIUM.exists(),
                                 reason=f"{CHROMIUM} is absent (apt-get install chromium "
                                        "chromium-driver)")]
PACED = {"DINFER_BATCH_ENGINE": "tests.stand_in_engines:InstantEngine",
         "STAND_IN_SECONDS_PER_CALL": "1.0"}  # a chunk of 3 requests takes 1 s


def submit(api, owner, tmp_path, name, lines, bad_line=None):
    rows = [{"custom_id": f"{name}-{i}", "prompt": f"add {i} 2="}  # distinct: no dedup
            for i in range(lines)]
    if bad_line is not None:
        rows[bad_line] = '{"custom_id": "broken", "prompt": '  # not JSON: fails at ingest
    path = write_jsonl(tmp_path / f"{name}.jsonl", rows)
    client = api.client(owner)
    file = client.files.create(file=path.open("rb"), purpose="batch")
    return client.batches.create(input_file_id=file.id, endpoint="/v1/completions",
                                 completion_window="24h", metadata={"name": name},
                                 extra_body={"chunk_size": 3, "max_tokens": 8, "block_length": 8})


@pytest.fixture
def browser(tmp_path):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    driver = chromium(downloads)
    driver.downloads = downloads
    yield driver
    driver.quit()


def find(driver, css):
    return driver.find_element(By.CSS_SELECTOR, css)


def finds(driver, css):
    return driver.find_elements(By.CSS_SELECTOR, css)


def follow(driver, css, url):
    """Click a link or button and wait until the browser is at `url`."""
    find(driver, css).click()
    wait_for(lambda: driver.current_url == url, 10)


def progress_of(driver, job_id):
    bars = finds(driver, f'tr[data-job="{job_id}"] progress')
    return float(bars[0].get_attribute("value")) if bars else -1.0


def sign_in(driver, url, key):
    driver.get(f"{url}/")
    assert driver.current_url.startswith(f"{url}/signin"), driver.current_url
    find(driver, "#key").send_keys(key)
    find(driver, ".signin button[type=submit]").click()
    wait_for(lambda: driver.current_url == f"{url}/", 10)


def test_dashboard_in_chromium(sqlite_api, browser, tmp_path):
    api, driver = sqlite_api, browser
    other = submit(api, "bob", tmp_path, "bobs", 2)
    watched = submit(api, "alice", tmp_path, "watched", 30, bad_line=4)
    doomed = submit(api, "alice", tmp_path, "doomed", 90)
    api.service.start_worker(tmp_path / "worker.log", **PACED)
    secrets = [api.keys["alice"], api.keys["admin"], str(tmp_path),
               str(api.service.model), api.service.env["DINFER_BATCH_DATABASE_URL"]]
    sources = []

    sign_in(driver, api.url, api.keys["alice"])
    listed = [row.get_attribute("data-job") for row in finds(driver, "tr[data-job]")]
    assert listed == [doomed.id, watched.id]  # newest first, bob's job not among them

    # the running job's bar moves while the page stays (the refresh script swaps <main>)
    driver.execute_script("window.stayed = 'yes'")
    seen = [progress_of(driver, watched.id)]
    assert 0 <= seen[0] < 30  # ~10 s of work: still running

    def moved():
        seen.append(progress_of(driver, watched.id))
        return len(set(seen)) >= 2

    wait_for(moved, 60, poll=0.5)
    assert seen == sorted(seen) and driver.execute_script("return window.stayed") == "yes"
    sources.append(driver.page_source)

    # its page, reached with the keyboard alone: the skip link first, then Tab to its link
    find(driver, "body").send_keys(Keys.TAB)
    assert driver.switch_to.active_element.get_attribute("class") == "skip"
    for _ in range(30):
        if (driver.switch_to.active_element.get_attribute("href") or "").endswith(watched.id):
            break
        driver.switch_to.active_element.send_keys(Keys.TAB)
    driver.switch_to.active_element.send_keys(Keys.ENTER)
    wait_for(lambda: driver.current_url == f"{api.url}/jobs/{watched.id}", 10)
    with api.service.sessions()() as session:
        line, message = session.execute(select(Item.line, Item.error_message).where(
            Item.job_id == watched.id, Item.status == "failed")).one()
    failures = find(driver, "table.failures tbody").text
    assert f"{line} invalid_request {message}" in failures
    assert "max_tokens" in find(driver, "dl.params").text
    sources.append(driver.page_source)

    # cancel the other job through the confirmation page, then download its output file
    api.service.wait_job(doomed.id, lambda job: job.completed_count > 0)
    driver.get(f"{api.url}/jobs/{doomed.id}")
    follow(driver, "a.danger", f"{api.url}/jobs/{doomed.id}/cancel")
    assert api.service.job(doomed.id).status == "in_progress"  # nothing happens on a GET
    follow(driver, "#confirm", f"{api.url}/jobs/{doomed.id}")
    assert api.service.job(doomed.id).status in ("cancelling", "cancelled")
    wait_for(lambda: find(driver, "#job-status").text == "cancelled", 60, poll=0.5)
    done = api.service.job(doomed.id)
    sources.append(driver.page_source)
    assert 0 < done.completed_count < done.total_count
    find(driver, 'a[href$="/files/output"]').click()
    target = driver.downloads / f"{doomed.id}_output.jsonl"
    wait_for(target.exists, 20)
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(lines) == done.completed_count
    assert all(line["custom_id"].startswith("doomed-") for line in lines)

    # and retry it, through its confirmation page: its unfinished requests run again
    follow(driver, 'a[href$="/retry"]', f"{api.url}/jobs/{doomed.id}/retry")
    follow(driver, "#confirm", f"{api.url}/jobs/{doomed.id}")
    assert api.service.job(doomed.id).retries == 1

    # another owner's job answers 404, in the browser and to a plain client
    driver.get(f"{api.url}/jobs/{other.id}")
    assert "404" in driver.title and other.id in find(driver, ".error").text
    cookies = {COOKIE: api.keys["alice"]}
    assert httpx.get(f"{api.url}/jobs/{other.id}", cookies=cookies).status_code == 404
    assert httpx.get(f"{api.url}/jobs/{other.id}/files/output",
                     cookies=cookies).status_code == 404
    assert httpx.get(f"{api.url}/fleet", cookies=cookies).status_code == 403

    # a form posted from another site is refused, whatever cookie comes with it
    for headers in ({"Origin": "http://evil.example"}, {}):
        refused = httpx.post(f"{api.url}/jobs/{watched.id}/cancel", cookies=cookies,
                             headers=headers)
        assert refused.status_code == 403
    assert api.service.job(watched.id).status != "cancelling"

    # a revoked key is signed out at its next request
    port = api.url.rsplit(":", 1)[1]
    assert api.service.cli("keys", "revoke", f"alice-{port}").exit_code == 0
    gone = httpx.get(f"{api.url}/jobs/{watched.id}", cookies=cookies)
    assert gone.status_code == 303 and gone.headers["location"].startswith("/signin?next=")

    # sign out; a wrong key is refused; the admin sees every owner's jobs and the fleet
    find(driver, "header form button").click()
    wait_for(lambda: driver.current_url.startswith(f"{api.url}/signin"), 10)
    assert not driver.get_cookies()
    find(driver, "#key").send_keys("sk-wrong")
    find(driver, ".signin button[type=submit]").click()
    wait_for(lambda: finds(driver, ".error"), 10)
    assert "invalid or revoked API key" in find(driver, ".error").text
    sign_in(driver, api.url, api.keys["admin"])
    assert other.id in [r.get_attribute("data-job") for r in finds(driver, "tr[data-job]")]
    driver.get(f"{api.url}/fleet")
    assert "live" in find(driver, "table.workers").text
    sources.append(driver.page_source)

    # with JavaScript off the pages and forms work the same; only the refresh is gone
    assert driver.find_element(By.TAG_NAME, "html").get_attribute("data-live") == "on"
    queued = submit(api, "bob", tmp_path, "queued", 60)
    plain = chromium(tmp_path / "downloads", javascript=False)
    try:
        sign_in(plain, api.url, api.keys["bob"])
        assert plain.find_element(By.TAG_NAME, "html").get_attribute("data-live") is None
        follow(plain, f'tr[data-job="{queued.id}"] a', f"{api.url}/jobs/{queued.id}")
        follow(plain, "a.danger", f"{api.url}/jobs/{queued.id}/cancel")
        follow(plain, "#confirm", f"{api.url}/jobs/{queued.id}")
        assert find(plain, "#job-status").text in ("cancelling", "cancelled")
    finally:
        plain.quit()

    for source in sources:
        for secret in secrets:
            assert secret not in source
        assert "/tmp/" not in source and "sk-" not in source


def test_dashboard_without_auth_shows_everything_with_a_banner(service, tmp_path):
    """On SQLite and PostgreSQL: no sign-in, a banner, every job; the job page's chart and
    first failures, and the fleet's waiting chunks, come from their aggregate queries."""
    from tests.api_helpers import start_api, stop_api

    api = start_api(service, tmp_path, DINFER_BATCH_API_AUTH="off")
    try:
        job = submit(api, "alice", tmp_path, "open", 7, bad_line=1)
        page = httpx.get(f"{api.url}/")
        assert page.status_code == 200 and "Authentication is off" in page.text
        assert job.id in page.text and "/signin" not in page.text
        fleet = httpx.get(f"{api.url}/fleet")
        assert fleet.status_code == 200
        assert f"<td>{service.queue}</td><td>normal</td><td class=\"num\">1</td>" \
               f"<td class=\"num\">2</td>" in fleet.text  # 6 valid lines: 2 chunks of 3
        service.start_worker(tmp_path / "worker.log",
                             DINFER_BATCH_ENGINE="tests.stand_in_engines:InstantEngine")
        service.wait_job(job.id, lambda row: row.status == "completed")
        detail = httpx.get(f"{api.url}/jobs/{job.id}")
        assert detail.status_code == 200 and "invalid_request" in detail.text
        assert detail.text.count("<polyline") == 1 and "<rect" in detail.text
        assert "Requests done (top: 6 requests)" in detail.text
        output = httpx.get(f"{api.url}/jobs/{job.id}/files/output")
        assert output.status_code == 200 and len(output.text.splitlines()) == 6

        # once its results are deleted, as the API: no files, no failures to show
        assert service.cli("delete", job.id).exit_code == 0
        detail = httpx.get(f"{api.url}/jobs/{job.id}")
        assert "results were deleted" in detail.text and "invalid_request" not in detail.text
        assert httpx.get(f"{api.url}/jobs/{job.id}/files/output").status_code == 404
    finally:
        stop_api(api)
