"""Messages of a conversation with function calls, as they come in: an assistant message
carrying `tool_calls`, a `role: "tool"` message answering one (`tool_call_id`), and
Responses' `function_call` / `function_call_output` input items, stored in chat's shape
(docs/tools.md). Errors are raised as the caller's class (`error`), naming the field."""

from __future__ import annotations

import json
from typing import Any

from dinfer_batch.formats.content import content_text
from dinfer_batch.formats.limits import shown

Message = dict[str, Any]


def chat_message(message: Any, where: str, error: type[ValueError]) -> Message:
    """One chat message as stored: {"role", "content"} (text), with `tool_calls` on an
    assistant message that made calls and `tool_call_id` on a tool message."""
    if not (isinstance(message, dict) and isinstance(message.get("role"), str)):
        raise error(f"{where} must be an object with a string role and content")
    for field in ("function_call", "audio"):
        if message.get(field):
            raise error(f"{where}.{field} cannot be honoured: only text messages and "
                        "tool_calls are supported")
    role, calls = message["role"], message.get("tool_calls")
    content = message.get("content")
    if role == "assistant" and calls and content is None:
        stored: Message = {"role": role, "content": ""}
    else:
        stored = {"role": role, "content": content_text(content, where, ("text",), error)}
    if calls:
        if role != "assistant":
            raise error(f"{where}.tool_calls belongs on an assistant message, not "
                        f"{shown(role)}")
        stored["tool_calls"] = [_chat_call(call, f"{where}.tool_calls[{j}]", error)
                                for j, call in enumerate(_listed(calls, where, error))]
    if role == "tool":
        stored["tool_call_id"] = _text(message.get("tool_call_id"),
                                       f"{where}.tool_call_id", error)
    return stored


def _listed(calls: Any, where: str, error: type[ValueError]) -> list[Any]:
    if not isinstance(calls, list):
        raise error(f"{where}.tool_calls must be a list, got {shown(calls)}")
    return calls


def _chat_call(call: Any, where: str, error: type[ValueError]) -> dict[str, Any]:
    """{"id", "type": "function", "function": {"name", "arguments"}}."""
    if not isinstance(call, dict) or call.get("type", "function") != "function" or \
            not isinstance(call.get("function"), dict):
        raise error(f"{where} must be {{\"id\", \"type\": \"function\", \"function\": "
                    f"{{\"name\", \"arguments\"}}}}, got {shown(call)}")
    function = call["function"]
    return stored_call(call.get("id"), function.get("name"), function.get("arguments"),
                       where, error)


def stored_call(call_id: Any, name: Any, arguments: Any, where: str,
                error: type[ValueError]) -> dict[str, Any]:
    """A call as a stored message holds it (chat's shape), its parts checked."""
    return {"id": _text(call_id, f"{where}.id", error), "type": "function",
            "function": {"name": _text(name, f"{where}.name", error),
                         "arguments": _text(arguments, f"{where}.arguments", error)}}


def _text(value: Any, where: str, error: type[ValueError]) -> str:
    if not isinstance(value, str):
        raise error(f"{where} must be a string, got {shown(value)}")
    return value


def responses_item(item: dict[str, Any], where: str, messages: list[Message],
                   error: type[ValueError]) -> None:
    """A Responses `function_call` item (joined to the assistant message just before it
    when that one made calls too) or `function_call_output` item, appended to
    `messages`."""
    if item["type"] == "function_call_output":
        output = item.get("output")
        messages.append({"role": "tool", "tool_call_id": _text(
            item.get("call_id"), f"{where}.call_id", error),
            "content": content_text(output, f"{where}.output", ("input_text", "text"),
                                    error) if not isinstance(output, str) else output})
        return
    call = stored_call(item.get("call_id"), item.get("name"), item.get("arguments"),
                       where, error)
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant" and "tool_calls" in last:
        last["tool_calls"].append(call)
    else:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})


def arguments_value(arguments: str) -> Any:
    """A call's arguments as a value (what chat templates expect), or the text itself
    when it is not JSON."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def calls_text(calls: list[dict[str, Any]]) -> str:
    """Calls in the form answers write them (formats/function_calling/tool_grammar.py): one
    call's object, several calls' array."""
    written = [{"name": call["function"]["name"],
                "arguments": arguments_value(call["function"]["arguments"])}
               for call in calls]
    return json.dumps(written[0] if len(written) == 1 else written, ensure_ascii=False)
