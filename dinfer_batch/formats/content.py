"""A message's text, as chat `messages` and Responses `input` (and function call outputs)
carry it: a string or text content parts; and how an error names a client's value."""

from __future__ import annotations

from typing import Any

from dinfer_batch.formats.limits import shown


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
                        f"({{\"type\": \"{parts[0]}\", \"text\": ...}}), got {described(part)}")
        if part["type"] not in parts:
            raise error(f"{where}.content[{j}] has type {shown(part['type'])}: only text "
                        f"parts are supported ({', '.join(parts)}), no images, files or audio")
        if not isinstance(part.get("text"), str):
            raise error(f"{where}.content[{j}].text must be a string, got "
                        f"{described(part.get('text'))}")
        texts.append(part["text"])
    return "\n".join(texts)


def described(value: Any) -> str:
    """A client's value as an error names it: its JSON type and a short look at it."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    kind = names.get(type(value), type(value).__name__)
    return kind if value is None else f"{kind} {shown(value, 40)}"
