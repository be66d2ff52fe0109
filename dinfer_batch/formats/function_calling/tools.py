"""Function tools on chat and `/v1/responses` bodies: `tools`, `tool_choice`,
`parallel_tool_calls` (and Responses' `max_tool_calls`) to what the request stores
under `"tools"` and the constraint its answer must meet (docs/tools.md, ADR 061).

Stored: `{"functions": [{"name", "description"?, "parameters"?}], "choice": "none" |
"auto" | "required" | {"name": NAME}, "parallel": bool[, "max_calls": N]}`; the
constraint (formats/function_calling/tool_grammar.py) goes into the line's parameters as
`structured`, checked as structured outputs are. Only function tools exist here: the hosted
tools of Responses (web search, file search, code interpreter, ...) and custom (free-text)
tools are refused by name."""

from __future__ import annotations

import re
from typing import Any

from dinfer_batch.formats.function_calling.tool_grammar import tool_spec
from dinfer_batch.formats.limits import InvalidParam, shown
from dinfer_batch.formats.parameters.structured import checked
from dinfer_engine.constraints.spec import ConstraintSpec
from dinfer_engine.constraints.spec_errors import ConstraintError

TOOL_FIELDS = ("tools", "tool_choice", "parallel_tool_calls", "max_tool_calls")
CHOICES = ("none", "auto", "required")
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for a function's name
MAX_TOOLS = 128  # OpenAI's limit
DESCRIBED = ("name", "description", "parameters")


def split_tools(body: dict[str, Any], responses: bool = False
                ) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, str] | None]:
    """The body without its tool fields, its tools as stored and their constraint
    (tool_fields)."""
    rest = {name: value for name, value in body.items() if name not in TOOL_FIELDS}
    return (rest, *tool_fields(body, responses))


def with_constraint(fields: dict[str, Any], constraint: dict[str, str] | None,
                    tools: dict[str, Any] | None) -> dict[str, Any]:
    """A line's generation fields with its tools' constraint; one asked for by
    `response_format`/`structured_outputs` too is refused (both would shape one answer)."""
    if constraint is None:
        return fields
    if "structured" in fields:
        choice = tools["choice"] if tools else None
        raise InvalidParam(f"tool_choice={shown(choice)} and a response format both shape "
                           "the answer; use one (a response format applies with "
                           'tool_choice "none")')
    return fields | {"structured": constraint}


def tool_fields(body: dict[str, Any], responses: bool = False
                ) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
    """The body's tools as stored (None when it has none) and the constraint its
    `tool_choice` asks for (stored form; None for text). `responses`: Responses' flat
    tool and choice shapes, else chat's."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise InvalidParam(f"parallel_tool_calls must be true or false, got {shown(parallel)}")
    if not tools:
        if tools is not None and not isinstance(tools, list):
            raise InvalidParam(f"tools must be a list of tools, got {shown(tools)}")
        if choice not in (None, "none", "auto"):  # without tools, "auto" is text
            raise InvalidParam(f"tool_choice={shown(choice)} needs tools; the body has none")
        return None, None
    functions = _functions(tools, responses)
    stored: dict[str, Any] = {"functions": functions,
                              "choice": _choice(choice, functions, responses),
                              "parallel": parallel is not False}
    max_calls = body.get("max_tool_calls")
    if max_calls is not None:
        if not isinstance(max_calls, int) or isinstance(max_calls, bool) or max_calls < 1:
            raise InvalidParam(f"max_tool_calls must be a positive integer, got "
                               f"{shown(max_calls)}")
        stored["max_calls"] = max_calls
    return stored, _constraint(stored)


def _functions(tools: Any, responses: bool) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise InvalidParam(f"tools must be a list of tools, got {shown(tools)}")
    if len(tools) > MAX_TOOLS:
        raise InvalidParam(f"tools holds {len(tools)} tools; the limit is {MAX_TOOLS}")
    functions, names = [], set()
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise InvalidParam(f"{where} has type {shown(kind)}: only function tools can be "
                               "honoured (no hosted, custom or built-in tools)")
        described = tool if responses else tool.get("function")
        if not responses:
            where += ".function"
        function = _function(described, where)
        if function["name"] in names:
            raise InvalidParam(f"{where}.name {function['name']!r} is used by two tools")
        names.add(function["name"])
        functions.append(function)
    return functions


def _function(described: Any, where: str) -> dict[str, Any]:
    """One function definition, checked: its name, description and parameters schema
    (each schema checked alone, so an error names its tool)."""
    if not isinstance(described, dict):
        raise InvalidParam(f"{where} must be an object {{\"name\", \"description\", "
                           f"\"parameters\"}}, got {shown(described)}")
    name = described.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InvalidParam(f"{where}.name must be 1 to 64 letters, digits, underscores or "
                           f"dashes, got {shown(name)}")
    description = described.get("description")
    if description is not None and not isinstance(description, str):
        raise InvalidParam(f"{where}.description must be a string, got {shown(description)}")
    strict = described.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise InvalidParam(f"{where}.strict must be true or false, got {shown(strict)}")
    parameters = described.get("parameters")
    if parameters is not None:
        try:
            ConstraintSpec.json_schema(parameters).grammar()
        except ConstraintError as exc:
            raise InvalidParam(f"{where}.parameters: {exc}") from exc
    return {key: described[key] for key in DESCRIBED if described.get(key) is not None}


def _choice(choice: Any, functions: list[dict[str, Any]], responses: bool) -> Any:
    """"none" | "auto" (the default with tools) | "required" | {"name": NAME}."""
    if choice is None or choice in CHOICES:
        return choice or "auto"
    named = choice.get("name") if responses and isinstance(choice, dict) else (
        (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None)
    if not isinstance(choice, dict) or choice.get("type") != "function" or \
            not isinstance(named, str):
        shape = ('{"type": "function", "name": ...}' if responses else
                 '{"type": "function", "function": {"name": ...}}')
        raise InvalidParam(f"tool_choice must be one of {', '.join(CHOICES)} or {shape}, "
                           f"got {shown(choice)}")
    if named not in {f["name"] for f in functions}:
        raise InvalidParam(f"tool_choice names the function {named!r}, which is not among "
                           "the tools")
    return {"name": named}


def _constraint(stored: dict[str, Any]) -> dict[str, str] | None:
    try:
        spec = tool_spec(stored["functions"], stored["choice"], stored["parallel"],
                         stored.get("max_calls"))
    except ConstraintError as exc:
        raise InvalidParam(f"tools: {exc}") from exc
    return None if spec is None else checked(spec, "tools")
