"""A chat request's prompt: its messages (and tools) through the model's chat template,
or the fixed plain rendering for a tokenizer without one (docs/tools.md).

- A template that takes tools (its source names `tools`) gets them as
  `apply_chat_template(messages, tools=[{"type": "function", "function": ...}])`, with
  each earlier call's arguments as a value (what templates expect), as transformers
  documents.
- A template that does not: the tools as a first system message `tools: [...]`, earlier
  calls as the assistant's text in the answers' form, tool results as user messages
  `tool: ...` (templates refuse roles they do not know).
- No template (the demo's character tokenizer): `role: content` lines, the tools first as
  `tools: [...]`, an assistant's calls after its text in the answers' form, then
  `assistant: `.

`tools: ` is followed by the functions' definitions as compact JSON ({"name",
"description", "parameters"})."""

from __future__ import annotations

import json
from typing import Any

from dinfer_batch.formats.function_calling.tool_messages import Message, arguments_value, calls_text


def chat_prompt(request: dict[str, Any], tokenizer: Any) -> str | list[int]:
    """The engine's prompt of a chat request: token ids through the chat template, else
    the plain text."""
    messages, tools = request["messages"], request.get("tools")
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return plain_text(messages, tools)
    if "tools" in template:
        listed = [{"type": "function", "function": f} for f in tools["functions"]] \
            if tools else None
        text = tokenizer.apply_chat_template([_templated(m) for m in messages],
                                             add_generation_prompt=True, tokenize=False,
                                             tools=listed)
    else:
        text = tokenizer.apply_chat_template(_without_tools(messages, tools),
                                             add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def counted_text(messages: list[Message], tools: dict[str, Any] | None) -> str:
    """The text whose length counts against the context: the messages' texts, or with
    tools the whole plain rendering (their definitions are most of it)."""
    if tools or any("tool_calls" in m for m in messages):
        return plain_text(messages, tools)
    return "\n".join(m["content"] for m in messages)


def plain_text(messages: list[Message], tools: dict[str, Any] | None) -> str:
    """The fixed rendering, for tokenizers without a chat template."""
    return plain_lines(messages, tools) + "assistant: "


def plain_lines(messages: list[Message], tools: dict[str, Any] | None) -> str:
    """The fixed rendering's lines before the answer's `assistant: `: the tools', then
    each message's (what lines sharing a prompt prefix share, jobs/intake/prefix_order.py)."""
    lines = [f"tools: {_definitions(tools)}\n"] if tools else []
    lines += [f"{m['role']}: {_flat(m)}\n" for m in messages]
    return "".join(lines)


def _definitions(tools: dict[str, Any]) -> str:
    return json.dumps(tools["functions"], ensure_ascii=False, separators=(",", ":"))


def _flat(message: Message) -> str:
    """A message's text with its calls after it, in the answers' form."""
    calls = message.get("tool_calls")
    if not calls:
        return str(message["content"])
    return " ".join(part for part in (message["content"], calls_text(calls)) if part)


def _templated(message: Message) -> Message:
    """A stored message as chat templates read it: calls' arguments as values, an
    assistant's empty text (beside its calls) as None."""
    if "tool_calls" not in message:
        return message
    calls = [{**call, "function": {"name": call["function"]["name"],
                                   "arguments": arguments_value(call["function"]["arguments"])}}
             for call in message["tool_calls"]]
    return {**message, "content": message["content"] or None, "tool_calls": calls}


def _without_tools(messages: list[Message], tools: dict[str, Any] | None) -> list[Message]:
    """Messages for a template that knows no tools: only roles and text."""
    flat = [{"role": "system", "content": f"tools: {_definitions(tools)}"}] if tools else []
    for message in messages:
        if message["role"] == "tool":
            flat.append({"role": "user", "content": f"tool: {message['content']}"})
        else:
            flat.append({"role": message["role"], "content": _flat(message)})
    return flat
