"""Requests from a prompt template and a JSONL file of variables, one request per vars line.

Templates use Python `str.format` fields: `{name}`, `{name!r}`, `{count:03d}`, `{row[0]}`;
a literal brace is doubled (`{{`). Chosen over Jinja2: one obvious syntax, no logic in
the template, no extra dependency, and a missing field is a plain KeyError to report. A vars
line's `custom_id` and request parameters (`max_tokens`, `temperature`, `seed`, `n`, ...)
apply to its request; every key is available to the template."""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dinfer_batch.errors import UserError
from dinfer_batch.formats.params import CHECKS
from dinfer_batch.formats.requests import ParsedLine, parse_object


@dataclass(frozen=True)
class Template:
    text: str
    messages: bool = False  # render one user chat message instead of a plain prompt

    def __post_init__(self) -> None:
        if not self.text:
            raise UserError("the template is empty")
        try:
            fields = [name for _, name, _, _ in string.Formatter().parse(self.text)
                      if name is not None]
        except ValueError as exc:
            raise UserError(f"invalid template: {exc} (a literal brace is written "
                            "{{ or }})") from None
        if not all(name.split(".")[0].split("[")[0].isidentifier() for name in fields):
            raise UserError("invalid template: every field needs a name, like {topic}; "
                            "a literal brace is written {{ or }}")
        if any("__" in name for name in fields):  # no way into Python's internals
            raise UserError("invalid template: field names may not contain '__'")

    def parse(self, text: str, line: int) -> ParsedLine:
        """The request of one vars line, or its error naming the line and the field."""
        try:
            values = json.loads(text.rstrip())
        except json.JSONDecodeError as exc:
            return ParsedLine(line, None, None,
                              f"line {line}: invalid JSON at column {exc.colno}: {exc.msg}")
        if not isinstance(values, dict):
            return ParsedLine(line, None, None, f"line {line}: expected a JSON object of "
                                                f"template variables, got {type(values).__name__}")
        custom_id = values.get("custom_id")
        try:
            rendered = self.text.format_map(values)
        except KeyError as exc:
            return ParsedLine(line, custom_id if isinstance(custom_id, str) else None, None,
                              f"line {line}: template field {exc.args[0]!r} is missing from "
                              "the vars line")
        except (ValueError, TypeError, IndexError, AttributeError) as exc:
            return ParsedLine(line, custom_id if isinstance(custom_id, str) else None, None,
                              f"line {line}: cannot render the template: {exc}")
        content: Any = ([{"role": "user", "content": rendered}] if self.messages else rendered)
        raw = {k: v for k, v in values.items() if k in CHECKS or k == "custom_id"}
        return parse_object(raw | {"messages" if self.messages else "prompt": content}, line)


def load_template(value: str, messages: bool = False) -> Template:
    """`--template FILE|TEXT`: the file's contents when `value` names a file, else the text."""
    try:
        path = Path(value).expanduser()
        text = path.read_text(encoding="utf-8").removesuffix("\n") if path.is_file() else value
    except (OSError, ValueError):  # not a possible file name: the template itself
        text = value
    return Template(text, messages)
