"""How figures read on a page: durations, model names without their server path, a job's
table row, and the geometry of the SVG charts (the templates only place it)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dinfer_batch.dashboard.queries import Timeline, priority_of
from dinfer_batch.jobs.reading.view import progress
from dinfer_batch.statuses import ENDED
from dinfer_batch.storage.tables import Job

CHART_W, CHART_H, PAD_L, PAD_B, PAD_T = 640, 180, 56, 24, 10


def duration(seconds: float | None) -> str:
    """3725 -> "1h 2m"; None -> "-"."""
    if seconds is None:
        return "-"
    seconds = max(int(seconds), 0)
    for unit, size, smaller, small_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60),
                                            ("m", 60, "s", 1)):
        if seconds >= size:
            whole, rest = seconds // size, (seconds % size) // small_size
            return f"{whole}{unit} {rest}{smaller}" if rest else f"{whole}{unit}"
    return f"{seconds}s"


def model_name(model: str) -> str:
    """A checkpoint's directory name: where the server keeps it is not the reader's business."""
    return Path(model).name or model


def short_id(job_id: str) -> str:
    """`batch_` and the first 8 hex digits: enough to tell jobs apart in a table (the
    link's title holds the whole id)."""
    return job_id if len(job_id) <= 16 else job_id[:14] + "…"


def label(job: Job) -> str:
    """The job's name: its `name` metadata, else its metadata in short."""
    meta = job.meta or {}
    if meta.get("name"):
        return str(meta["name"])
    return ", ".join(f"{key}={value}" for key, value in list(meta.items())[:3])


@dataclass(frozen=True)
class JobRow:
    job: Job
    label: str
    model: str
    priority: str
    done: int
    percent: float
    tokens_per_s: float | None  # of the live workers on it; None when none runs it
    eta: str
    age: str


def job_row(job: Job, live_rate: float | None, now: float | None = None) -> JobRow:
    figures = progress(job)
    percent = 100.0 * figures.done / job.total_count if job.total_count else 0.0
    running = job.status not in ENDED
    return JobRow(job, label(job), model_name(job.model), priority_of(job), figures.done,
                  percent, live_rate if running else None,
                  duration(figures.eta_s) if running else "-",
                  duration((now or time.time()) - job.created_at))


@dataclass(frozen=True)
class Chart:
    """An SVG chart's parts, in the viewBox's units."""

    title: str
    unit: str
    top: float  # the value at the top of the plot
    points: str  # a polyline's points, or ""
    bars: list[tuple[float, float, float, float]]  # x, y, width, height
    ticks: list[tuple[float, str]]  # x, label under the axis
    width: int = CHART_W
    height: int = CHART_H
    left: int = PAD_L
    bottom: int = CHART_H - PAD_B


def charts(line: Timeline | None) -> list[Chart]:
    """Completed requests (cumulative line) and tokens/s per bucket (bars)."""
    if line is None:
        return []
    cumulative, total = [], 0
    for done in line.done:
        total += done
        cumulative.append(total)
    rates = [tokens / line.width for tokens in line.tokens]
    return [_chart("Requests done", "requests", cumulative, line, as_line=True),
            _chart("Tokens per second", "tokens/s", rates, line, as_line=False)]


def _chart(title: str, unit: str, values: list[float] | list[int], line: Timeline,
           as_line: bool) -> Chart:
    top = max(max(values, default=0), 1)
    plot_w, plot_h = CHART_W - PAD_L - 8, CHART_H - PAD_B - PAD_T
    step = plot_w / max(len(values), 1)

    def y(value: float) -> float:
        return round(PAD_T + plot_h * (1 - value / top), 1)

    points = " ".join(f"{PAD_L + step * (i + 1):.1f},{y(v)}" for i, v in enumerate(values))
    bars = [(round(PAD_L + step * i + 0.5, 1), y(v), round(max(step - 1, 0.5), 1),
             round(PAD_T + plot_h - y(v), 1)) for i, v in enumerate(values) if v]
    span = line.width * len(values)
    ticks = [(PAD_L + plot_w * fraction, duration(span * fraction))
             for fraction in (0, 0.25, 0.5, 0.75, 1.0)]
    return Chart(title, unit, top, f"{PAD_L},{y(0)} {points}" if as_line else "",
                 [] if as_line else bars, ticks)


def params_text(params: dict[str, Any] | None) -> list[tuple[str, str]]:
    return [(key, str(value)) for key, value in sorted((params or {}).items())]
