"""When a schedule is due: a cron expression (`m h dom mon dow`, in this machine's local
time zone, parsed by croniter) or a fixed interval (`30s`, `10m`, `1h`, `1d`)."""

from __future__ import annotations

import re
from datetime import datetime

from croniter import CroniterError, croniter

from dinfer_batch.errors import UserError
from dinfer_batch.formats.limits import shown

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_EVERY_S = 366 * 86400  # a year: anything longer is a typo (and overflows a date)


def parse_every(text: str) -> int:
    """Seconds in a duration such as `30s`, `10m`, `1h`, `1d`."""
    match = re.fullmatch(r"\s*(\d{1,12})\s*([smhd])\s*", text)
    if not match or int(match[1]) == 0:
        raise UserError(f"bad duration {shown(text)}: use a positive whole number and a "
                        "unit, s, m, h or d (30s, 10m, 1h, 1d)")
    return int(match[1]) * UNITS[match[2]]


def check_every(text: str, floor: float) -> str:
    """A new schedule's interval: between `floor` (DINFER_BATCH_MIN_EVERY) and
    MAX_EVERY_S."""
    seconds = parse_every(text)
    if not floor <= seconds <= MAX_EVERY_S:
        raise UserError(f"bad duration {shown(text)}: an interval is from {floor:g}s "
                        f"(DINFER_BATCH_MIN_EVERY) to {MAX_EVERY_S // 86400}d")
    return text.strip()


def check_cron(expr: str) -> str:
    """A cron expression that is valid and fires at least once in the coming years (a
    date that never comes, such as 31 February, is refused)."""
    fields = expr.split()
    if len(fields) != 5 or not croniter.is_valid(expr):
        raise UserError(f"bad cron expression {shown(expr)}: expected 5 fields, minute hour "
                        "day-of-month month day-of-week, e.g. '0 2 * * *' (02:00 every day)")
    try:
        croniter(" ".join(fields), datetime.now().astimezone()).get_next(float)
    except CroniterError as exc:
        raise UserError(f"bad cron expression {shown(expr)}: it never fires ({exc})") from None
    return " ".join(fields)


def next_time(kind: str, trigger: str, after: float, anchor: float) -> float:
    """The first due time strictly after `after`. An interval keeps the cadence of `anchor`
    (its previous due time), skipping the times that were missed while nobody ran."""
    if kind == "every":
        every = parse_every(trigger)
        steps = max(1, int((after - anchor) // every) + 1)
        return anchor + steps * every
    start = datetime.fromtimestamp(after).astimezone()
    return float(croniter(trigger, start).get_next(float))


def describe(kind: str, trigger: str) -> str:
    return f"every {trigger}" if kind == "every" else f"cron {trigger}"
