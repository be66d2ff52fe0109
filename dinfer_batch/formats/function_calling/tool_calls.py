"""An answer of a line with tools, read back as OpenAI shapes it: text, or calls
(docs/tools.md, ADR 061).

An answer whose first non-space character is `{` or `[` is calls (the only text the
grammar lets start so, formats/function_calling/tool_grammar.py): the object of one call, or
the array of several. A complete answer parses whole, and each call's arguments already
validate against its function's schema (the witness wrote them). An answer cut short
(`length`) keeps the calls written in full before the cut, each valid; the unfinished one is
left out, so no call is ever returned that looks complete and is not. A call's `arguments`
is its text as the model wrote it. Ids are the item's, so reading a result twice gives the
same ids."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

DECODER = json.JSONDecoder()
# a call's text up to its arguments' value (names are letters, digits, _ and -)
ARGUMENTS = re.compile(r'\{\s*"name"\s*:\s*"[A-Za-z0-9_-]*"\s*,\s*"arguments"\s*:\s*')
CALL_STARTS = ("{", "[")


def answer_calls(text: str, tools: dict[str, Any] | None
                 ) -> list[dict[str, Any]] | None:
    """The calls in an answer ({"name", "arguments": JSON text}), or None when it is
    text (no tools asked for, `tool_choice` "none", or text written under "auto")."""
    if not tools or tools["choice"] == "none":
        return None
    body = text.lstrip()
    if not body.startswith(CALL_STARTS):
        return None
    if body.startswith("{"):
        written = _complete(body, 0)
        return [] if written is None else [written[0]]
    calls: list[dict[str, Any]] = []
    at = _blank(body, 1)
    while at < len(body) and body[at] != "]":
        written = _complete(body, at)
        if written is None:
            break
        calls.append(written[0])
        at = _blank(body, written[1])
        at = _blank(body, at + 1) if body[at:at + 1] == "," else at
    return calls


def _complete(text: str, at: int) -> tuple[dict[str, Any], int] | None:
    """The call written from `at` ({"name", "arguments": its text as written}) and where
    it ends, or None when it is cut short."""
    try:
        value, end = DECODER.raw_decode(text, at)
    except ValueError:
        return None
    if not isinstance(value, dict) or {"name", "arguments"} != set(value):
        return None
    head = ARGUMENTS.match(text, at)  # the grammar writes name, then arguments
    arguments = text[head.end():end - 1].rstrip() if head else json.dumps(value["arguments"])
    return {"name": value["name"], "arguments": arguments}, end


def _blank(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def call_id(request_id: str, choice: int, index: int) -> str:
    """A call's id, `call_` and 24 hex digits, fixed by the item, choice and position."""
    digest = hashlib.sha256(f"{request_id}:{choice}:{index}".encode()).hexdigest()
    return f"call_{digest[:24]}"


def chat_tool_message(calls: list[dict[str, Any]], request_id: str, choice: int
                      ) -> dict[str, Any]:
    """A chat choice's message of calls: no content, `tool_calls` in OpenAI's shape (none
    when the answer was cut short before its first call ended)."""
    if not calls:
        return {"role": "assistant", "content": None}
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id(request_id, choice, index), "type": "function",
                            "function": {"name": call["name"],
                                         "arguments": call["arguments"]}}
                           for index, call in enumerate(calls)]}


def chat_finish_reason(calls: list[dict[str, Any]] | None, finish_reason: str) -> str:
    """`tool_calls` for an answer of calls that ended, else the sample's own."""
    return "tool_calls" if calls and finish_reason == "stop" else finish_reason


def function_call_items(calls: list[dict[str, Any]], response_id: str, choice: int,
                        status: str) -> list[dict[str, Any]]:
    """Responses' `function_call` output items of one sample's calls."""
    return [{"type": "function_call", "id": f"fc_{call_id(response_id, choice, index)[5:]}",
             "call_id": call_id(response_id, choice, index), "name": call["name"],
             "arguments": call["arguments"], "status": status}
            for index, call in enumerate(calls)]


def echoed_tools(tools: dict[str, Any] | None) -> tuple[list[dict[str, Any]], Any, bool]:
    """A Response's `tools` (flat function tools), `tool_choice` and
    `parallel_tool_calls`, as the request asked."""
    if not tools:
        return [], "none", False
    listed = [{"type": "function", "name": f["name"], "description": f.get("description"),
               "parameters": f.get("parameters"), "strict": True} for f in tools["functions"]]
    choice = tools["choice"]
    if isinstance(choice, dict):
        choice = {"type": "function", "name": choice["name"]}
    return listed, choice, tools["parallel"]
