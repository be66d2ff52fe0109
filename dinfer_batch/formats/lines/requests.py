"""One input line to a normalised request, or to a specific error.

Three shapes are accepted: plain `{"prompt": ...}`, chat `{"messages": [...]}`, and OpenAI
batch lines `{"custom_id", "method": "POST", "url", "body": {...}}` (without `method` and
`url`, as Mistral's, the job's endpoint, else the body's kind). The normalised request
is `{"prompt": str | token ids}` (with `"prompts"` for a list: formats/lines/prompts.py) or
`{"messages": [...]}`, plus `"params"` (the line's overrides).
A body's `model` (OpenAI batch files name one on every line) is not part of the request:
it comes back beside it, for the job to compare with its own."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from dinfer_batch.formats.function_calling.tool_messages import chat_message
from dinfer_batch.formats.function_calling.tools import split_tools, with_constraint
from dinfer_batch.formats.limits import (
    MAX_CUSTOM_ID,
    MAX_LINE_CHARS,
    BadValue,
    InvalidParam,
    Unstorable,
    check_text,
    decode_line,
    shown,
    text_problem,
)
from dinfer_batch.formats.lines import infill
from dinfer_batch.formats.lines.chat_prompt import chat_prompt, counted_text
from dinfer_batch.formats.lines.prompts import parse_prompt, prompts_of
from dinfer_batch.formats.lines.responses import URL as RESPONSES_URL
from dinfer_batch.formats.lines.responses import InvalidResponsesBody, responses_request
from dinfer_batch.formats.parameters.compat import generation_fields, spelt_names, with_spelling
from dinfer_batch.formats.parameters.params import check_params
from dinfer_engine.infill import Infill

URLS = {"/v1/completions": "prompt", "/v1/chat/completions": "messages",
        RESPONSES_URL: "input"}
# Azure OpenAI's batch files write the urls without the version (its docs:
# "url": "/chat/completions"); they name the same endpoints
UNVERSIONED = {url.removeprefix("/v1"): url for url in URLS}
COMPLETIONS_ONLY = ("echo", "best_of")  # OpenAI's legacy completions fields


class InvalidLine(ValueError):
    """The line cannot become a request; the message says why."""


class ParsedLine(NamedTuple):
    """A tuple, not a frozen dataclass: a million of them are made, at a third the cost."""

    line: int
    custom_id: str | None
    request: dict[str, Any] | None
    error: str | None
    model: str | None = None  # the model the line's body names, if any


class Refused(str):
    """A line its reader did not decode (a table row whose values are over the line
    limit: jobs/intake/parquet_input.py); the text says why, and becomes the line's error."""


def parse_line(text: str, line: int, endpoint: str | None = None) -> ParsedLine:
    """`endpoint`: the job's (`--endpoint`, a batch's `endpoint`), which a line without
    its own `url` takes (docs/adr/059-any-maximum-and-the-jobs-endpoint.md)."""
    raw = decode(text, line)
    return raw if isinstance(raw, ParsedLine) else parse_object(raw, line, endpoint)


def decode(text: str, line: int, id_key: str = "custom_id") -> Any:
    """The line's JSON value, or the ParsedLine of its error (limits.decode_line); a line
    refused for a string no database stores keeps its own id (under `id_key`) when that
    one is storable."""
    if isinstance(text, Refused):
        return ParsedLine(line, None, None, f"line {line}: {text}")
    if len(text) > MAX_LINE_CHARS:
        return ParsedLine(line, None, None, f"line {line}: the line is longer than "
                                            f"{MAX_LINE_CHARS} characters")
    try:
        return decode_line(text.rstrip())  # a trailing newline would put errors on "line 2"
    except json.JSONDecodeError as exc:
        return ParsedLine(line, None, None,
                          f"line {line}: invalid JSON at column {exc.colno}: {exc.msg}")
    except Unstorable as exc:
        return ParsedLine(line, _own_id(exc.value, id_key), None, f"line {line}: {exc}")
    except BadValue as exc:
        return ParsedLine(line, None, None, f"line {line}: {exc}")


def _own_id(value: Any, id_key: str) -> str | None:
    own = value.get(id_key) if isinstance(value, dict) else None
    return own if isinstance(own, str) and text_problem(own, MAX_CUSTOM_ID) is None else None


def decode_object(text: str, line: int, expected: str = "a JSON object",
                  id_key: str = "custom_id") -> dict[str, Any] | ParsedLine:
    """The line's JSON object, or the ParsedLine of its error (not JSON, or not an object:
    `expected` names what the line should have been)."""
    value = decode(text, line, id_key)
    if isinstance(value, (ParsedLine, dict)):
        return value
    return ParsedLine(line, None, None,
                      f"line {line}: expected {expected}, got {type(value).__name__}")


def parse_object(raw: Any, line: int, endpoint: str | None = None) -> ParsedLine:
    """A decoded line (or a rendered template line) to a request; `endpoint` as for
    parse_line."""
    if not isinstance(raw, dict):
        return ParsedLine(line, None, None, f"line {line}: expected a JSON object, "
                                            f"got {type(raw).__name__}")
    custom_id = raw.get("custom_id")
    if custom_id is not None and (not isinstance(custom_id, str)
                                  or len(custom_id) > MAX_CUSTOM_ID):
        try:  # a string's NUL or surrogate was refused with the line (decode_line)
            check_text("custom_id", custom_id, MAX_CUSTOM_ID)
        except BadValue as exc:
            return ParsedLine(line, None, None, f"line {line}: {exc}")
    try:
        request = _request(raw, endpoint)
    except (InvalidLine, InvalidParam, InvalidResponsesBody, BadValue) as exc:
        return ParsedLine(line, custom_id, None, f"line {line}: {exc}")
    body = raw["body"] if isinstance(raw.get("body"), dict) else raw
    model = body.get("model")
    return ParsedLine(line, custom_id, request, None, model if isinstance(model, str) else None)


def _request(raw: dict[str, Any], endpoint: str | None) -> dict[str, Any]:
    if "url" in raw or "body" in raw:
        return _openai_request(raw, endpoint)
    fields = {k: v for k, v in raw.items() if k != "custom_id"}
    if "prompt" not in fields and "messages" not in fields:
        raise InvalidLine('missing \'prompt\'; a line is {"prompt": "..."}, {"messages": '
                          '[...]} or an OpenAI batch line {"custom_id", "method", "url", "body"}')
    expected = "messages" if "messages" in fields else "prompt"
    return _body_request(fields, expected)


def _openai_request(raw: dict[str, Any], endpoint: str | None) -> dict[str, Any]:
    if raw.get("method", "POST") != "POST":
        raise InvalidLine(f"method must be POST, got {shown(raw['method'])}")
    body = raw.get("body")
    if not isinstance(body, dict):
        raise InvalidLine("body must be a JSON object")
    url = raw.get("url")
    if url is None:  # Mistral's lines: custom_id and body; the endpoint is the job's
        url = endpoint or _url_of(body)
    url = UNVERSIONED.get(url, url) if isinstance(url, str) else url
    if url not in URLS:
        raise InvalidLine(f"unknown url {shown(url)}; supported: {', '.join(URLS)}")
    if url == RESPONSES_URL:
        request = responses_request(body)
        _completions_only(request)
        return request
    return _body_request(body, URLS[url])


def _url_of(body: dict[str, Any]) -> str:
    """The endpoint of a line with neither a url nor a job's endpoint, by its body."""
    for url, field in URLS.items():
        if field in body:
            return url
    raise InvalidLine("the line has no url and the batch no endpoint (--endpoint), and its "
                      "body has none of 'prompt', 'messages', 'input' to tell which it is")


def endpoint_of(request: dict[str, Any]) -> str:
    """The OpenAI endpoint a normalised request answers as."""
    if "responses" in request:
        return RESPONSES_URL
    return "/v1/chat/completions" if "messages" in request else "/v1/completions"


def _body_request(body: dict[str, Any], expected: str) -> dict[str, Any]:
    other = "messages" if expected == "prompt" else "prompt"
    if other in body:
        raise InvalidLine(f"{other!r} does not belong in a {expected!r} request")
    if expected not in body:
        raise InvalidLine(f"missing {expected!r} in body")
    content = parse_prompt(body[expected]) if expected == "prompt" \
        else {expected: _messages(body[expected])}
    rest = {k: v for k, v in body.items() if k != expected}
    tools, constraint = None, None
    if expected == "messages":
        rest, tools, constraint = split_tools(rest)
    gaps = infill.infill_fields(rest, expected)
    spelt = spelt_names(rest)
    fields = with_constraint(generation_fields(rest), constraint, tools)
    request = {**content, **gaps, "params": check_params(fields, spelt)}
    if tools is not None:
        request["tools"] = tools
    infill.check_request(request)
    _completions_only(request)
    return with_spelling(request, spelt)


def _completions_only(request: dict[str, Any]) -> None:
    """OpenAI's legacy completions fields, and what a list or token-id prompt cannot
    combine with."""
    for name in COMPLETIONS_ONLY:
        if name in request["params"] and "prompt" not in request:
            raise InvalidLine(f"{name} belongs to completions lines (a prompt); chat "
                              "requests have none")
    if "suffix" in request and (not isinstance(request["prompt"], str) or "prompts" in request
                                or request["params"].get("echo")):
        raise InvalidLine("suffix (fill in the middle) takes one prompt string, not a list "
                          "or token ids, and no echo")


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise InvalidLine("messages must be a non-empty list")
    return [chat_message(message, f"messages[{i}]", InvalidLine)
            for i, message in enumerate(value)]


def prompt_text(request: dict[str, Any]) -> str:
    """The text whose length counts against the model's context: of a list, its longest
    prompt's (token-id prompts count by `prompt_ids`)."""
    if "prompt" in request:
        texts = [p for p in prompts_of(request) if isinstance(p, str)]
        return "".join([max(texts, key=len, default=""), *request.get("suffix", [])])
    return counted_text(request["messages"], request.get("tools"))


def prompt_ids(request: dict[str, Any]) -> int:
    """The tokens of the request's longest token-id prompt (0: none is token ids)."""
    if "prompt" not in request:
        return 0
    return max((len(p) for p in prompts_of(request) if not isinstance(p, str)), default=0)


def render_prompts(request: dict[str, Any], tokenizer: Any,
                   params: dict[str, Any]) -> list[str | list[int] | Infill]:
    """The engine's prompt of each of the request's prompts (completions' lists; one
    otherwise), as render_prompt makes it."""
    if "prompts" in request:
        return list(request["prompts"])
    return [render_prompt(request, tokenizer, params)]


def render_prompt(request: dict[str, Any], tokenizer: Any,
                  params: dict[str, Any] | None = None) -> str | list[int] | Infill:
    """The engine's prompt: the text itself, an infill canvas (with the line's
    `infill_lengths` from `params`, its effective parameters), or the messages (and
    tools) through the model's chat template (formats/lines/chat_prompt.py)."""
    if "suffix" in request:
        return infill.canvas(request, params or request["params"], request["prompt"])
    if "prompt" in request:
        return request["prompt"]  # a string, or token ids
    return chat_prompt(request, tokenizer)
