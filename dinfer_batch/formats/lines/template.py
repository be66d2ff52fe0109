"""Requests from a prompt template and a JSONL file of variables, one request per vars line.

Templates use a safe subset of Python `str.format` fields: `{name}`, `{name!r}`,
`{count:03d}`, `{row[0]}`; a literal brace is doubled (`{{`). Chosen over Jinja2: one
obvious syntax, no logic in the template, no extra dependency, and a missing field is a
plain KeyError to report. Nothing in a field reaches Python's internals or takes unbounded
work: no attribute access (`.`), no field nested in a format spec (`{x:{w}}`), widths and
precisions up to MAX_WIDTH, and rendering stops once the prompt passes MAX_LINE_CHARS. A
vars line's `custom_id` and request parameters (`max_tokens`, `temperature`, `seed`, `n`,
...) apply to its request; every key is available to the template."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dinfer_batch.errors import UserError
from dinfer_batch.formats.limits import MAX_LINE_CHARS, text_problem
from dinfer_batch.formats.lines.requests import ParsedLine, decode_object, parse_object
from dinfer_batch.formats.parameters.params import CHECKS

MAX_WIDTH = 1000
FIELD_NAME = re.compile(r"[^\W\d]\w*(\[[^\[\]]+\])*")  # name, then [key] or [index]
FORMAT_SPEC = re.compile(r"(.?[<>=^])?[+\- ]?z?#?0?(?P<width>\d*)[,_]?"
                         r"(\.(?P<precision>\d+))?[bcdeEfFgGnosxX%]?")
_FORMATTER = string.Formatter()


@dataclass(frozen=True)
class Template:
    text: str
    messages: bool = False  # render one user chat message instead of a plain prompt
    # (literal text, field name or None, conversion, format spec) of each piece
    _pieces: tuple[tuple[str, str | None, str | None, str], ...] = field(
        init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.text:
            raise UserError("the template is empty")
        if (problem := text_problem(self.text)) is not None:
            raise UserError(f"invalid template: it {problem}")
        try:
            pieces = tuple((literal, name, conversion, spec or "") for literal, name, spec,
                           conversion in _FORMATTER.parse(self.text))
        except ValueError as exc:
            raise UserError(f"invalid template: {exc} (a literal brace is written "
                            "{{ or }})") from None
        for _, name, conversion, spec in pieces:
            if name is not None:
                _check_field(name, conversion, spec)
        object.__setattr__(self, "_pieces", pieces)

    def parse(self, text: str, line: int) -> ParsedLine:
        """The request of one vars line, or its error naming the line and the field."""
        values = decode_object(text, line, "a JSON object of template variables")
        if isinstance(values, ParsedLine):
            return values
        custom_id = values.get("custom_id")
        try:
            rendered = self.render(values)
        except KeyError as exc:
            return ParsedLine(line, custom_id if isinstance(custom_id, str) else None, None,
                              f"line {line}: template field {exc.args[0]!r} is missing from "
                              "the vars line")
        except (ValueError, TypeError, IndexError) as exc:
            return ParsedLine(line, custom_id if isinstance(custom_id, str) else None, None,
                              f"line {line}: cannot render the template: {exc}")
        content: Any = ([{"role": "user", "content": rendered}] if self.messages else rendered)
        raw = {k: v for k, v in values.items() if k in CHECKS or k == "custom_id"}
        return parse_object(raw | {"messages" if self.messages else "prompt": content}, line)

    def render(self, values: dict[str, Any]) -> str:
        """The template with `values`; ValueError once it is longer than MAX_LINE_CHARS
        (checked piece by piece, so a huge result is never built)."""
        parts, size = [], 0
        for literal, name, conversion, spec in self._pieces:
            parts.append(literal)
            if name is not None:
                value, _ = _FORMATTER.get_field(name, (), values)
                parts.append(format(_FORMATTER.convert_field(value, conversion), spec))
            size += len(parts[-1]) + (len(literal) if name is not None else 0)
            if size > MAX_LINE_CHARS:
                raise ValueError(f"the rendered prompt is longer than {MAX_LINE_CHARS} "
                                 "characters")
        return "".join(parts)


def _check_field(name: str, conversion: str | None, spec: str) -> None:
    if not FIELD_NAME.fullmatch(name):
        raise UserError(f"invalid template: field {{{name}}}: a field is a name, optionally "
                        "indexed ({row[0]}, {row[key]}); no attributes, no positional "
                        "fields; a literal brace is written {{ or }}")
    if "__" in name:  # no way into Python's internals
        raise UserError("invalid template: field names may not contain '__'")
    if conversion not in (None, "r", "s", "a"):
        raise UserError(f"invalid template: field {{{name}}} has the conversion "
                        f"!{conversion}; only !r, !s and !a exist")
    match = FORMAT_SPEC.fullmatch(spec)
    if match is None or "{" in spec:
        raise UserError(f"invalid template: field {{{name}}} has the format spec {spec!r}: "
                        "only fill, align, sign, width, precision and type are allowed, "
                        "with no nested fields")
    for part in ("width", "precision"):
        if match[part] and int(match[part]) > MAX_WIDTH:
            raise UserError(f"invalid template: field {{{name}}} has a {part} over "
                            f"{MAX_WIDTH}")


def load_template(value: str, messages: bool = False) -> Template:
    """`--template FILE|TEXT`: the file's contents when `value` names a file, else the text."""
    try:
        path = Path(value).expanduser()
        text = path.read_text(encoding="utf-8").removesuffix("\n") if path.is_file() else value
    except (OSError, ValueError):  # not a possible file name: the template itself
        text = value
    return Template(text, messages)
