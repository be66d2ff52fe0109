"""The docs stay true to the code: every dotted name and every path cited in backticks in
README.md and docs/ (ADRs included) exists. Text struck through (`~~...~~`) is history
that a later note supersedes, and is not checked. The ADR index (docs/adr/README.md)
lists every ADR file once, in order."""

from __future__ import annotations

import importlib
import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# names are resolved from these packages, and from their subpackages as `jobs.create.x`
PACKAGES = ("dinfer_batch", "dinfer_engine", "dinfer_kernels", "dinfer_workers", "dinfer_training",
            "dinfer_migrations", "dinfer_models", "tests", "benchmarks")
FILE_SUFFIXES = (".json", ".jsonl", ".py", ".md", ".txt", ".safetensors", ".toml", ".yml",
                 ".yaml", ".sh", ".db", ".log", ".partial", ".cfg")

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
STRUCK = re.compile(r"~~.*?~~", re.S)
SPAN = re.compile(r"`([^`]+)`")  # may wrap onto the next line
DOTTED = re.compile(r"(?<![\w./:-])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?![\w/-])")
INDEX_ROW = re.compile(r"^\| `docs/adr/([^`]+)` \|", re.M)
PATH = re.compile(r"(?<![\w./:<>$*-])[A-Za-z_][\w.*-]*(?:/[\w.*-]+)+/?(?![\w/<>])")


def cited(doc: Path) -> tuple[set[str], set[str]]:
    """(dotted names, paths) cited in backticks outside code blocks and struck text."""
    text = STRUCK.sub("", FENCE.sub("", doc.read_text()))
    names: set[str] = set()
    paths: set[str] = set()
    for span in SPAN.findall(text):
        paths |= set(PATH.findall(span))
        stripped = PATH.sub("", span)
        names |= {n for n in DOTTED.findall(stripped) if not n.endswith(FILE_SUFFIXES)}
    return names, paths


def resolves(name: str) -> bool | None:
    """True when `name` imports (a module, then attributes), or is a `table.column` of our
    schema; None when it starts with neither one of our packages nor a table (a config
    key, a tensor name, an event name: nothing to check)."""
    from dinfer_batch.storage.tables import Base

    parts = name.split(".")
    table = Base.metadata.tables.get(parts[0])
    if table is not None and len(parts) == 2 and parts[1] in table.columns:
        return True
    roots = [p for p in PACKAGES if parts[0] == p] or [
        p for p in ("dinfer_batch", "dinfer_engine") if (ROOT / p / parts[0]).is_dir()]
    if not roots:
        return None if table is None else False
    for root in roots:
        full = parts if parts[0] == root else [root, *parts]
        for split in range(len(full), 0, -1):
            try:
                found: object = importlib.import_module(".".join(full[:split]))
            except ImportError:
                continue
            try:
                for attribute in full[split:]:
                    found = getattr(found, attribute)
            except AttributeError:
                break
            return True
    return False


def test_the_docs_are_found() -> None:
    assert ROOT / "docs" / "architecture.md" in DOCS
    names, paths = cited(ROOT / "docs" / "architecture.md")
    assert len(names) > 10 and len(paths) > 20


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_cited_names_and_paths_exist(doc: Path) -> None:
    names, paths = cited(doc)
    missing = sorted(p for p in paths if not any(ROOT.glob(p.rstrip("/"))))
    missing += sorted(n for n in names if resolves(n) is False)
    assert not missing, f"{doc.relative_to(ROOT)} cites what does not exist: {missing}"


def test_struck_and_fenced_text_is_not_checked(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("`dinfer_batch.nothing` `no/such/file.py` ~~`engine.gone`~~\n"
                   "```\n`engine.also_gone`\n```\n`config.json` `mlp.w1` `redis://h:1/0`\n")
    names, paths = cited(doc)
    assert names == {"dinfer_batch.nothing", "mlp.w1"} and paths == {"no/such/file.py"}
    assert resolves("dinfer_batch.nothing") is False and resolves("mlp.w1") is None
    assert resolves("jobs.create.job_spec") and resolves("dinfer_engine.Engine.from_pretrained")
    assert resolves("jobs.other_models") and resolves("jobs.no_such_column") is False
    assert resolves("batch.completed") is None  # an event name, not dinfer_engine/batch.py


def index_problems(index: str, files: list[str]) -> list[str]:
    """What is wrong with an ADR index (the text of docs/adr/README.md) for these ADR file
    names: a file missing, listed twice, or listed out of order; a row naming no file."""
    listed = INDEX_ROW.findall(index)
    problems = [f"missing: {name}" for name in sorted(set(files) - set(listed))]
    problems += [f"no such file: {name}" for name in sorted(set(listed) - set(files))]
    problems += [f"listed twice: {name}" for name in sorted(set(listed))
                 if listed.count(name) > 1]
    problems += [f"out of order: {before} before {after}"
                 for before, after in itertools.pairwise(listed) if before > after]
    return problems


def test_the_adr_index_lists_every_adr_once_in_order() -> None:
    adrs = ROOT / "docs" / "adr"
    files = sorted(p.name for p in adrs.glob("[0-9][0-9][0-9]-*.md"))
    assert len(files) > 50
    assert index_problems((adrs / "README.md").read_text(), files) == []


def test_a_broken_adr_index_fails() -> None:
    files = ["001-a.md", "002-b.md", "003-c.md"]

    def index(*names: str) -> str:
        return "| ADR | decision |\n|---|---|\n" + "".join(
            f"| `docs/adr/{name}` | what it decides |\n" for name in names)

    assert index_problems(index(*files), files) == []
    assert index_problems(index("001-a.md", "003-c.md"), files) == ["missing: 002-b.md"]
    assert index_problems(index("001-a.md", "002-b.md", "002-b.md", "003-c.md"),
                          files) == ["listed twice: 002-b.md"]
    assert index_problems(index("001-a.md", "003-c.md", "002-b.md"), files) == [
        "out of order: 003-c.md before 002-b.md"]
    assert index_problems(index(*files, "004-d.md"), files) == ["no such file: 004-d.md"]


def test_the_readme_names_every_family() -> None:
    from dinfer_engine.choices import FAMILIES

    opening = (ROOT / "README.md").read_text().split("\n\n")[1]
    missing = [f.name for f in FAMILIES.values() if f"{f.name}," not in opening.replace(")", ",")]
    assert not missing, f"README.md's opening paragraph does not name {missing}"
