"""OpenAI `/v1/responses` batch lines: the body to a normalised request, and a finished
item to the `Response` object the official client's types parse.

A Responses body is mapped onto what a chat line would say, so that both run through one
path: `input` (a string, or message items with text content parts) and `instructions`
(a system message first) become `messages`; `max_output_tokens` is `max_tokens`;
`text.format` becomes the chat-style `response_format` value and is checked as a chat
line's `response_format` is (compat.generation_fields). The rest of the body that shapes
the Response object (`instructions`, `metadata`, `text`) is kept under the request's
`"responses"` key, which also marks the request as one of this endpoint."""

from __future__ import annotations

from typing import Any

from dinfer_batch.formats.content import content_text, described
from dinfer_batch.formats.function_calling.tool_calls import (
    answer_calls,
    echoed_tools,
    function_call_items,
)
from dinfer_batch.formats.function_calling.tool_messages import responses_item
from dinfer_batch.formats.function_calling.tools import split_tools, with_constraint
from dinfer_batch.formats.limits import BadValue, InvalidParam, check_metadata, shown
from dinfer_batch.formats.parameters.compat import generation_fields, spelt_names, with_spelling
from dinfer_batch.formats.parameters.params import check_params

URL = "/v1/responses"
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = ("input_text", "output_text", "text")
# fields of a Responses body that are not chat fields: accepted at the value that changes
# nothing, refused otherwise with the reason
NEUTRAL: dict[str, Any] = {"include": [], "background": False, "truncation": "disabled",
                           "reasoning": {}, "top_logprobs": 0, "logprobs": False}
WHY_NOT = {
    "include": "no extra output items (logprobs, sources, images) are produced",
    "background": "a batch line always runs in the background",
    "truncation": "prompts are never truncated: a prompt longer than the context fails its "
                  "line",
    "reasoning": "the models have no reasoning mode",
    "top_logprobs": "Response objects carry no logprobs here; use /v1/chat/completions "
                    "with logprobs: true",
    "logprobs": "Response objects carry no logprobs here; use /v1/chat/completions with "
                "logprobs: true",
    "previous_response_id": "each line is answered alone: no stored conversation state",
    "conversation": "each line is answered alone: no stored conversation state",
    "prompt": "stored prompt templates are not supported; send input",
}
KEPT = ("instructions", "metadata", "text")
ALIASES = {"max_output_tokens": "max_tokens"}


class InvalidResponsesBody(ValueError):
    """The body cannot become a request; the message names the field."""


def responses_request(body: dict[str, Any]) -> dict[str, Any]:
    """A `/v1/responses` body to `{"messages", "params", "responses"}`; raises
    InvalidResponsesBody or InvalidParam naming the field."""
    if "input" not in body:
        raise InvalidResponsesBody("missing 'input' in body")
    if "messages" in body:
        raise InvalidResponsesBody("'messages' does not belong in a /v1/responses body; "
                                   "send 'input'")
    if "max_tokens" in body or "max_completion_tokens" in body:
        raise InvalidResponsesBody("a /v1/responses body sets max_output_tokens, not "
                                   "max_tokens")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidResponsesBody(f"instructions must be a string, got {shown(instructions)}")
    messages = ([{"role": "system", "content": instructions}] if instructions else []) + \
        _input_messages(body["input"])
    body, tools, constraint = split_tools(body, responses=True)
    rest = {}
    for name, value in body.items():
        if name in ("input", "instructions", "text") or value is None:
            continue
        if name in WHY_NOT:
            if name not in NEUTRAL or value != NEUTRAL[name]:
                raise InvalidParam(f"{name} cannot be honoured: {WHY_NOT[name]}")
            continue
        rest[name] = value
    text = body.get("text")
    if text is not None:
        rest["response_format"] = response_format(text)
    spelt = spelt_names(rest, ALIASES)
    try:
        params = check_params(with_constraint(generation_fields(rest, ALIASES), constraint,
                                              tools), spelt)
    except InvalidParam as exc:
        if "response_format" in str(exc):
            raise InvalidParam(f"text.format: {exc}") from exc
        raise
    kept = {name: body[name] for name in KEPT if body.get(name) is not None}
    if "metadata" in kept:  # echoed on the result: OpenAI's bounds, as a batch's
        if not isinstance(kept["metadata"], dict):
            raise InvalidResponsesBody(f"metadata must be an object, got "
                                       f"{shown(kept['metadata'])}")
        try:
            check_metadata(kept["metadata"])
        except BadValue as exc:
            raise InvalidResponsesBody(str(exc)) from None
    request = {"messages": messages, "params": params, "responses": kept}
    return with_spelling(request | {"tools": tools} if tools else request, spelt)


def response_format(text: Any) -> dict[str, Any]:
    """`text: {"format": ...}` as the chat-style `response_format` value: `{"type":
    "text"}`, `{"type": "json_object"}`, or `{"type": "json_schema", "json_schema":
    {"name", "schema", "strict"[, "description"]}}` (Responses puts these fields on the
    format itself)."""
    if not isinstance(text, dict):
        raise InvalidResponsesBody(f"text must be an object, got {shown(text)}")
    unknown = set(text) - {"format", "verbosity"}
    if unknown:
        raise InvalidResponsesBody(f"text.{sorted(unknown)[0]} is not a known field; "
                                   "text takes format")
    if text.get("verbosity") not in (None, "low", "medium", "high"):  # else ignored (ADR 059)
        raise InvalidParam(f"text.verbosity must be low, medium or high, got "
                           f"{shown(text['verbosity'])}")
    form = text.get("format", {"type": "text"})
    if not isinstance(form, dict) or form.get("type") not in ("text", "json_object",
                                                               "json_schema"):
        raise InvalidResponsesBody("text.format must be {\"type\": \"text\"}, "
                                   "{\"type\": \"json_object\"} or {\"type\": \"json_schema\", "
                                   f"\"name\", \"schema\"}}, got {shown(form)}")
    if form["type"] != "json_schema":
        return {"type": form["type"]}
    schema = {name: form[name] for name in ("name", "schema", "strict", "description")
              if name in form}
    return {"type": "json_schema", "json_schema": schema}


def _input_messages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        if not value:
            raise InvalidResponsesBody("input must be a non-empty string or list of items")
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise InvalidResponsesBody(f"input must be a non-empty string or list of message "
                                   f"items, got {shown(value)}")
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise InvalidResponsesBody(f"input[{i}] must be a message object "
                                       f"({{\"role\", \"content\"}}), got {described(item)}")
        kind = item.get("type", "message")
        if kind in ("function_call", "function_call_output"):
            responses_item(item, f"input[{i}]", messages, InvalidResponsesBody)
            continue
        if kind != "message":
            raise InvalidResponsesBody(f"input[{i}] has type {shown(kind)}: only message, "
                                       "function_call and function_call_output items are "
                                       "supported (no reasoning, hosted tools' calls or item "
                                       "references)")
        role = item.get("role")
        if role not in ROLES:
            raise InvalidResponsesBody(f"input[{i}].role must be one of {', '.join(ROLES)}, "
                                       f"got {shown(role)}")
        messages.append({"role": ROLES[role],
                         "content": content_text(item.get("content"), f"input[{i}]",
                                                 TEXT_PARTS, InvalidResponsesBody)})
    return messages


def response_body(request: dict[str, Any], response_id: str, created: int, model: str,
                  samples: list[dict[str, Any]], prompt: tuple[int, int], completion_tokens: int,
                  metrics: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's Response object: one assistant message per sample (one unless `n` asks
    for more), `incomplete` with reason max_output_tokens when an answer filled its
    whole canvas without ending. `prompt`: its tokens and how many were cached."""
    prompt_tokens, cached = prompt
    kept, params = request.get("responses", {}), request.get("params", {})
    incomplete = any(sample["finish_reason"] == "length" for sample in samples)
    status = "incomplete" if incomplete else "completed"
    output = [item for index, sample in enumerate(samples)
              for item in _output_items(request, response_id, index, sample)]
    tools, tool_choice, parallel = echoed_tools(request.get("tools"))
    return {
        "id": response_id, "object": "response", "created_at": created, "status": status,
        "completed_at": created, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": kept.get("instructions"), "metadata": kept.get("metadata", {}),
        "model": model, "output": output, "parallel_tool_calls": parallel,
        "temperature": params.get("temperature"), "top_p": params.get("top_p"),
        "max_output_tokens": params.get("max_tokens"), "tool_choice": tool_choice,
        "tools": tools, "max_tool_calls": (request.get("tools") or {}).get("max_calls"),
        "text": kept.get("text", {"format": {"type": "text"}}), "truncation": "disabled",
        "background": False, "store": False,
        "usage": {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": cached,
                                           "cache_write_tokens": 0},
                  "output_tokens": completion_tokens,
                  "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": prompt_tokens + completion_tokens},
        "metrics": metrics,
    }


def _output_items(request: dict[str, Any], response_id: str, index: int,
                  sample: dict[str, Any]) -> list[dict[str, Any]]:
    """One sample's output items: its assistant message, or its function calls."""
    status = "incomplete" if sample["finish_reason"] == "length" else "completed"
    calls = answer_calls(sample["text"], request.get("tools"))
    if calls is not None:
        return function_call_items(calls, response_id, index, status)
    return [{"type": "message", "id": f"msg_{response_id.removeprefix('resp_')}_{index}",
             "status": status, "role": "assistant",
             "content": [{"type": "output_text", "text": sample["text"], "annotations": [],
                          "logprobs": []}]}]
