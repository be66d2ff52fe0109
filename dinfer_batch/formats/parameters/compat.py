"""The fields of OpenAI request bodies that are not generation parameters, so that a
user's existing batch file runs unchanged: fields that cannot change the output are
accepted and dropped; fields we cannot honour fail the line, naming the field and why."""

from __future__ import annotations

import re
from typing import Any

from dinfer_batch.formats.limits import InvalidParam, shown
from dinfer_batch.formats.parameters.params import ENGINE_NAMES
from dinfer_batch.formats.parameters.structured import body_spec

# routing and bookkeeping that do not change the output
IGNORED = {"model", "user", "metadata", "store", "service_tier", "parallel_tool_calls",
           "stream_options", "prompt_cache_key", "safety_identifier"}
# accepted only at the value that changes nothing
NEUTRAL: dict[str, Any] = {
    "stream": False,
}
WHY_NOT: dict[str, str] = {
    "stream": "a batch is never streamed",
    # chat and /v1/responses consume these first (formats/function_calling/tools.py): left
    # here, on a completions line
    "tools": "tools belong on /v1/chat/completions and /v1/responses lines",
    "tool_choice": "tools belong on /v1/chat/completions and /v1/responses lines",
    "functions": "functions is OpenAI's deprecated form of tools; send tools "
                 '([{"type": "function", "function": {...}}]), the same definitions',
    "function_call": "function_call is OpenAI's deprecated form of tool_choice; send "
                     "tool_choice",
    "audio": "audio output is not supported",
    "modalities": "only text output is supported",
    "prediction": "predicted outputs are not supported",
    "reasoning_effort": "the models have no reasoning mode",
    "web_search_options": "web search is not supported",
}
# ADR 059: the other fields of OpenAI's and vLLM's bodies that cannot change a diffusion
# model's answer, accepted and dropped; vLLM's that we honour only at their default value,
# or not at all (docs/openai-api.md lists every field)
IGNORED |= {"verbosity", "prompt_cache_retention", "priority", "request_id",
            "spaces_between_special_tokens", "kv_transfer_params", "vllm_xargs"}
NEUTRAL |= {"use_beam_search": False, "length_penalty": 1.0,
            "include_stop_str_in_output": False, "skip_special_tokens": True,
            "add_generation_prompt": True, "continue_final_message": False,
            "return_tokens_as_token_ids": False, "stop_token_ids": [], "bad_words": []}
WHY_NOT |= {
    "use_beam_search": "a diffusion model decodes no beams",
    "length_penalty": "it scores beams, and a diffusion model decodes none",
    "include_stop_str_in_output": "stop strings are cut from the answer",
    "skip_special_tokens": "answers are decoded without special tokens",
    "add_generation_prompt": "chat prompts always end with the assistant's turn",
    "continue_final_message": "chat prompts always end with the assistant's turn",
    "return_tokens_as_token_ids": "logprobs name tokens by their text",
    "stop_token_ids": "stop token ids are not supported; use stop strings",
    "bad_words": "bad words are not supported",
    "allowed_token_ids": "use structured outputs (structured_outputs.choice or regex)",
    "truncate_prompt_tokens": "prompts are never truncated: a prompt longer than the "
                              "context fails its line",
    "prompt_logprobs": "a diffusion model commits no prompt token, so it scores none",
    "logits_processors": "custom logits processors are not supported",
    "chat_template": "the model's own chat template is used",
    "chat_template_kwargs": "the model's own chat template is used, as it is",
    "documents": "the model's own chat template is used, without documents",
    "guided_json": "send structured_outputs: {\"json\": ...} or response_format",
    "guided_regex": "send structured_outputs: {\"regex\": ...}",
    "guided_choice": "send structured_outputs: {\"choice\": ...}",
    "guided_grammar": "grammars are not supported; structured_outputs takes json, regex "
                      "or choice",
    "mm_processor_kwargs": "only text prompts are supported",
}
UNSUPPORTED = set(WHY_NOT) - set(NEUTRAL)
ALIASES = {"max_completion_tokens": "max_tokens"}
# an empty logit_bias is no bias: as if unset (a family that refuses the field takes it)
EMPTY_IS_UNSET = ("logit_bias",)
# -> `structured` (formats/parameters/structured.py)
STRUCTURED = ("response_format", "structured_outputs")


def generation_fields(body: dict[str, Any], aliases: dict[str, str] = ALIASES
                      ) -> dict[str, Any]:
    """The body's generation parameters, with OpenAI's aliases under our names."""
    fields = _logprobs(body)
    if (structured := body_spec(body)) is not None:
        fields["structured"] = structured
    for name, value in body.items():
        if name in IGNORED or name in fields or name in STRUCTURED \
                or (name in EMPTY_IS_UNSET and value == {}):
            continue
        if name in NEUTRAL:
            if value is not None and value != NEUTRAL[name]:
                raise InvalidParam(f"{name}={shown(value)} cannot be honoured: {WHY_NOT[name]} "
                                   f"(remove it, or set {NEUTRAL[name]!r})")
            continue
        if name in UNSUPPORTED:
            if value is not None:
                raise InvalidParam(f"{name} cannot be honoured: {WHY_NOT[name]}")
            continue
        target = aliases.get(name, name)
        if target in fields and fields[target] != value:
            raise InvalidParam(f"{name} and {target} disagree ({shown(value)} vs "
                               f"{shown(fields[target])})")
        fields[target] = value
    return fields


def spelt_names(body: dict[str, Any], aliases: dict[str, str] = ALIASES) -> dict[str, str]:
    """Our name -> the alias the body spelt it with (when it did not spell ours), for
    errors that name what the user sent."""
    return {aliases[name]: name for name in body
            if name in aliases and aliases[name] not in body and body[name] is not None}


def with_spelling(request: dict[str, Any], spelt: dict[str, str]) -> dict[str, Any]:
    """The request, with the aliases its body used (`spelt`) when it used any: checks made
    later (the prompt's room in the context, the key's ceilings) name the field as sent."""
    return request | {"spelt": spelt} if spelt else request


def spelling(request: dict[str, Any], name: str) -> str:
    """What the request's body called our parameter `name` (`max_tokens` ->
    `max_output_tokens` on a Responses line)."""
    return str(request.get("spelt", {}).get(name, name))



def in_user_names(message: str, request: dict[str, Any]) -> str:
    """An engine's or a ceiling's message (dinfer_engine/generation_config.py,
    formats/parameters/ceilings.py) with our parameters named as the request spelt them (gen_length
    and max_tokens -> max_output_tokens on a Responses line)."""
    for ours, engine in ENGINE_NAMES.items():
        message = re.sub(rf"\b({engine}|{ours})\b", spelling(request, ours), message)
    return message


def _logprobs(body: dict[str, Any]) -> dict[str, Any]:
    """Chat asks `logprobs: true` (+ `top_logprobs: N`); the legacy completions endpoint
    asks `logprobs: N`, meaning the same with N alternatives."""
    logprobs, top = body.get("logprobs"), body.get("top_logprobs")
    if isinstance(logprobs, int) and not isinstance(logprobs, bool):
        if top is not None and top != logprobs:
            raise InvalidParam(f"logprobs={shown(logprobs)} and top_logprobs={shown(top)} "
                               "disagree")
        return {"logprobs": True, "top_logprobs": logprobs}
    if top and logprobs is not True:
        raise InvalidParam("top_logprobs needs logprobs: true")
    return {}
