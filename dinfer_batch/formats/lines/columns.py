"""Requests from rows of a table (a Parquet file, or JSONL objects of any shape): one
column holds the prompt, or the chat messages, named by an option; a `custom_id` column
names the request; columns named as request parameters (`max_tokens`, `n`, `seed`, ...)
apply to it, as a template's vars line's do; every other column is kept as the request's
`metadata` and comes back on its result (a `metadata` object on the output line, a
`metadata` column of `results --format parquet`), within a batch metadata's bounds
(limits.check_row_metadata: a row past them fails, naming the column)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from dinfer_batch.errors import UserError
from dinfer_batch.formats.limits import BadValue, check_row_metadata
from dinfer_batch.formats.lines.requests import ParsedLine, decode_object, parse_object
from dinfer_batch.formats.parameters.params import CHECKS


class LineParser(Protocol):
    """What turns one input line into a request besides formats.lines.requests.parse_line: a
    template (formats/lines/template.py) or a table's columns."""

    def parse(self, text: str, line: int) -> ParsedLine: ...


@dataclass(frozen=True)
class Columns:
    text: str  # the column holding the prompt (or the messages)
    messages: bool = False  # the column holds chat messages, not a prompt
    custom_id: str = "custom_id"

    @classmethod
    def detect(cls, names: list[str], custom_id: str = "custom_id") -> Columns:
        """`prompt` or `messages`, whichever the table has (UserError for neither, or
        both)."""
        found = [name for name in ("prompt", "messages") if name in names]
        if len(found) != 1:
            raise UserError(f"the table has {'both' if found else 'neither'} a 'prompt' and "
                            "a 'messages' column; name the one to use with --prompt-column "
                            f"or --messages-column (its columns: {', '.join(names[:20])})")
        return cls(found[0], found[0] == "messages", custom_id)

    def check(self, names: list[str]) -> None:
        """UserError unless the table has the text column."""
        if self.text not in names:
            raise UserError(f"the table has no column {self.text!r} (its columns: "
                            f"{', '.join(names[:20])})")

    def parse(self, text: str, line: int) -> ParsedLine:
        row = decode_object(text, line, id_key=self.custom_id)
        if isinstance(row, ParsedLine):
            return row
        custom_id = row.get(self.custom_id)
        if isinstance(custom_id, int) and not isinstance(custom_id, bool):
            custom_id = str(custom_id)  # tables number their rows
        if self.text not in row or row[self.text] is None:
            return ParsedLine(line, custom_id if isinstance(custom_id, str) else None, None,
                              f"line {line}: the {self.text!r} column is empty")
        raw: dict[str, Any] = {"messages" if self.messages else "prompt": row[self.text]}
        if custom_id is not None:
            raw["custom_id"] = custom_id
        metadata = {}
        for name, value in row.items():
            if name in (self.text, self.custom_id) or value is None:
                continue
            if name in CHECKS:
                raw[name] = value
            else:
                metadata[name] = value
        try:
            check_row_metadata(metadata)
        except BadValue as exc:
            return ParsedLine(line, custom_id if isinstance(custom_id, str) else None, None,
                              f"line {line}: {exc}")
        parsed = parse_object(raw, line)
        if parsed.request is not None and metadata:
            parsed.request["metadata"] = metadata
        return parsed
