"""A status is spelt in one place: the vocabularies of the status columns
(dinfer_batch/statuses.py; docs/adr/044). A scan of the service's source, modules and
templates, finds a value of any of them written as a string literal where a status is
compared, assigned, typed (a field's `Literal[...]`), put in a row or in SQL: everywhere
else the members are used, so renaming or adding a status cannot leave a spelling
behind."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from dinfer_batch.statuses import ChunkStatus, DeliveryStatus, ItemStatus, JobStatus, RunStatus

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dinfer_batch"
VOCABULARIES = "dinfer_batch/statuses.py"
VALUES = {status.value for vocabulary in (JobStatus, ChunkStatus, ItemStatus, RunStatus,
                                          DeliveryStatus) for status in vocabulary}
# modules whose `status` fields are another vocabulary, of no column: what they write is
# derived from an item's row, never stored or compared with one
OTHER_VOCABULARIES = {
    "dinfer_batch/formats/lines/responses.py",  # OpenAI's Response object: completed, incomplete
    "dinfer_batch/jobs/reading/parquet_output.py",  # the Parquet results' column (docs/service.md)
}
SQL = re.compile(r"status\s*(=|!=|<>|in)\s*\(?\s*'(\w+)'", re.IGNORECASE)
TEMPLATE = re.compile(r"status\s*(==|!=|in)\s*[\"'(]")
MATCHERS = {"in_", "not_in", "is_", "is_not"}


def _named_status(node: ast.AST) -> bool:
    """A status, as a column, an attribute, a variable or a key: `Item.status`,
    `job.status`, `status`, `job_status`, `row["status"]`."""
    if isinstance(node, ast.Attribute):
        return node.attr == "status" or node.attr.endswith("_status")
    if isinstance(node, ast.Name):
        return node.id == "status" or node.id.endswith("_status")
    return isinstance(node, ast.Subscript) and _is_key(node.slice)


def _is_key(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value == "status"


def _spelt(node: ast.AST | None) -> list[str]:
    """The status values spelt as literals in this expression (a tuple's, an if-else's)."""
    if node is None:
        return []
    return [sub.value for sub in ast.walk(node)
            if isinstance(sub, ast.Constant) and sub.value in VALUES]


def _in_sql(tree: ast.AST) -> list[str]:
    """Status values inside SQL text, or quoted for a literal column (`"'failed'"`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [value for _, value in SQL.findall(node.value) if value in VALUES]
            if node.value.strip("'") in VALUES and node.value.startswith("'"):
                found.append(node.value)
    return found


def _literals(tree: ast.AST) -> list[str]:
    """Each status literal that this module compares with a status, writes as one (a
    keyword, a row's key, an assignment), matches a status column with, or puts in SQL."""
    found = _in_sql(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_named_status(side) for side in sides):
                found += [value for side in sides for value in _spelt(side)]
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr in MATCHERS \
                    and _named_status(node.func.value):
                found += [value for arg in node.args for value in _spelt(arg)]
            found += [value for keyword in node.keywords if keyword.arg == "status"
                      for value in _spelt(keyword.value)]
        elif isinstance(node, ast.Dict):
            found += [value for key, item in zip(node.keys, node.values, strict=True)
                      if _is_key(key) for value in _spelt(item)]
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_named_status(target) for target in targets):
                found += _spelt(node.value)
                if isinstance(node, ast.AnnAssign):  # a field typed Literal["failed", ...]
                    found += _spelt(node.annotation)
    return found


@functools.cache  # parsed once for the tests below
def _modules() -> dict[str, ast.AST]:
    return {path.relative_to(ROOT).as_posix(): ast.parse(path.read_text(), str(path))
            for path in sorted(PACKAGE.rglob("*.py"))}


def test_no_module_spells_a_status_outside_the_vocabularies():
    found = {name: literals for name, tree in _modules().items()
             if name != VOCABULARIES and name not in OTHER_VOCABULARIES
             and (literals := _literals(tree))}
    assert found == {}


def test_no_template_compares_a_status_with_a_literal():
    found = {path.relative_to(ROOT).as_posix(): TEMPLATE.findall(path.read_text())
             for path in sorted(PACKAGE.rglob("*.html"))}
    assert {name: hits for name, hits in found.items() if hits} == {}


def test_the_other_vocabularies_are_still_spelt_there():
    """An exemption that no longer has a literal to excuse goes."""
    modules = _modules()
    assert [name for name in sorted(OTHER_VOCABULARIES) if not _literals(modules[name])] == []


@pytest.mark.parametrize("source", [
    'q.where(Item.status == "pending")',
    'if job.status in ("cancelled", "cancelling"): pass',
    'x = "done" != chunk.status',
    'q.where(Chunk.status.in_(["queued", "running"]))',
    'update(Item).values(status="failed")',
    'ScheduleRun(status="starting")',
    'values = {"status": "failed" if error else "completed"}',
    'values["status"] = "delivered"',
    'delivery.status = "failed"',
    'job_status: str = "expired"',
    'class Batch:\n    status: Literal["validating", "failed"]',
    'text("status = \'failed\'")',
    'literal_column("\'failed\'")',
])
def test_the_scan_finds_each_way_of_spelling_a_status(source):
    assert _literals(ast.parse(source)) != []


@pytest.mark.parametrize("source", [
    'q.where(Item.status == ItemStatus.PENDING)',
    'update(Item).values(status=str(to))',
    'counts = {"completed": 1, "failed": 2}',  # keys, not statuses
    'where = "running" if job.running else "queued"',  # a queue place
    'if item["status"] == "incomplete": pass',  # not a value of any vocabulary
    'class Batch:\n    status: JobStatus',
])
def test_the_scan_leaves_what_is_not_a_spelt_status(source):
    assert _literals(ast.parse(source)) == []


def test_the_template_scan_finds_a_compared_literal():
    assert TEMPLATE.findall('{% if job.status != "cancelling" %}') != []
    assert TEMPLATE.findall('{% if job.status != cancelling %}') == []
