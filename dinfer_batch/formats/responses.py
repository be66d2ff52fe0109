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

from dinfer_batch.formats.compat import generation_fields, spelt_names, with_spelling
from dinfer_batch.formats.limits import BadValue, InvalidParam, check_metadata, shown
from dinfer_batch.formats.params import check_params

URL = "/v1/responses"
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = ("input_text", "output_text", "text")
# fields of a Responses body that are not chat fields: accepted at the value that changes
# nothing, refused otherwise with the reason
NEUTRAL: dict[str, Any] = {"tools": [], "tool_choice": "none", "include": [],
                           "background": False, "truncation": "disabled", "reasoning": {},
                           "max_tool_calls": None, "top_logprobs": 0, "logprobs": False}
WHY_NOT = {
    "tools": "tool calling is not supported",
    "tool_choice": "tool calling is not supported",
    "include": "no extra output items (logprobs, sources, images) are produced",
    "background": "a batch line always runs in the background",
    "truncation": "prompts are never truncated: a prompt longer than the context fails its "
                  "line",
    "reasoning": "the models have no reasoning mode",
    "max_tool_calls": "tool calling is not supported",
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
        params = check_params(generation_fields(rest, ALIASES), spelt)
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
    return with_spelling({"messages": messages, "params": params, "responses": kept}, spelt)


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


def _input_messages(value: Any) -> list[dict[str, str]]:
    if isinstance(value, str):
        if not value:
            raise InvalidResponsesBody("input must be a non-empty string or list of items")
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise InvalidResponsesBody(f"input must be a non-empty string or list of message "
                                   f"items, got {shown(value)}")
    messages = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise InvalidResponsesBody(f"input[{i}] must be a message object "
                                       f"({{\"role\", \"content\"}}), got {_kind(item)}")
        kind = item.get("type", "message")
        if kind != "message":
            raise InvalidResponsesBody(f"input[{i}] has type {shown(kind)}: only message "
                                       "items are supported (no tool calls, reasoning or "
                                       "item references)")
        role = item.get("role")
        if role not in ROLES:
            raise InvalidResponsesBody(f"input[{i}].role must be one of {', '.join(ROLES)}, "
                                       f"got {shown(role)}")
        messages.append({"role": ROLES[role],
                         "content": content_text(item.get("content"), f"input[{i}]",
                                                 TEXT_PARTS, InvalidResponsesBody)})
    return messages


def content_text(content: Any, where: str, parts: tuple[str, ...],
                 error: type[ValueError]) -> str:
    """A message's text (chat `messages` and Responses `input` alike): a string, or text
    content parts of the given types joined by newlines (as vLLM joins them); images,
    files and audio are refused with `error`, naming the part."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise error(f"{where}.content must be a string or a non-empty list of content "
                    f"parts, got {shown(content)}")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or "type" not in part:
            raise error(f"{where}.content[{j}] must be a content part object "
                        f"({{\"type\": \"{parts[0]}\", \"text\": ...}}), got {_kind(part)}")
        if part["type"] not in parts:
            raise error(f"{where}.content[{j}] has type {shown(part['type'])}: only text "
                        f"parts are supported ({', '.join(parts)}), no images, files or audio")
        if not isinstance(part.get("text"), str):
            raise error(f"{where}.content[{j}].text must be a string, got "
                        f"{_kind(part.get('text'))}")
        texts.append(part["text"])
    return "\n".join(texts)


def _kind(value: Any) -> str:
    """A client's value as an error names it: its JSON type and a short look at it."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    kind = names.get(type(value), type(value).__name__)
    return kind if value is None else f"{kind} {shown(value, 40)}"


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
    output = [{"type": "message", "id": f"msg_{response_id.removeprefix('resp_')}_{index}",
               "status": "incomplete" if sample["finish_reason"] == "length" else "completed",
               "role": "assistant",
               "content": [{"type": "output_text", "text": sample["text"], "annotations": [],
                            "logprobs": []}]}
              for index, sample in enumerate(samples)]
    return {
        "id": response_id, "object": "response", "created_at": created, "status": status,
        "completed_at": created, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": kept.get("instructions"), "metadata": kept.get("metadata", {}),
        "model": model, "output": output, "parallel_tool_calls": False,
        "temperature": params.get("temperature"), "top_p": params.get("top_p"),
        "max_output_tokens": params.get("max_tokens"), "tool_choice": "none", "tools": [],
        "text": kept.get("text", {"format": {"type": "text"}}), "truncation": "disabled",
        "background": False, "store": False,
        "usage": {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": cached,
                                           "cache_write_tokens": 0},
                  "output_tokens": completion_tokens,
                  "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": prompt_tokens + completion_tokens},
        "metrics": metrics,
    }
