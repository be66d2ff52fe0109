"""The live progress bar of `status --watch` and `submit --wait`."""

import io

from rich.console import Console

from dinfer_batch.tables import Job
from dinfer_batch.watch import follow


def test_the_bar_of_an_ended_job_fits_80_columns():
    job = Job(id=f"batch_{'0' * 32}", status="completed", model="/models/demo",
              total_count=1200, completed_count=1150, failed_count=50,
              completion_tokens=9000, created_at=100.0, in_progress_at=100.0,
              completed_at=130.0)
    screen = io.StringIO()
    assert follow(lambda: job, Console(file=screen, width=80)) is job
    assert "completed" in screen.getvalue()
    assert "1200/1200" in screen.getvalue() and "300.0 tok/s" in screen.getvalue()
    assert "…" not in screen.getvalue()
