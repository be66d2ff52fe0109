"""Log-probabilities: the engine's per-token values as stored with an item, and the two
shapes OpenAI answers them in (chat `content` entries; legacy completions' parallel
lists). For a diffusion model a token's log-probability is the one it had at the
iteration that committed it (see dinfer_engine.GenerationConfig)."""

from __future__ import annotations

from typing import Any


def token_logprobs(result: Any, tokenizer: Any,
                   cut_at: int | None = None) -> list[dict[str, Any]] | None:
    """[{"token", "logprob", "top_logprobs": [{"token", "logprob"}]}] for the answer's
    tokens (up to the first that starts at or after character `cut_at`, where a stop
    string cut the text short); None when not asked for."""
    values = getattr(result, "logprobs", None)
    if values is None:
        return None
    tops = getattr(result, "top_logprobs", None) or [[] for _ in values]
    entries, length = [], 0
    for token_id, value, top in zip(result.token_ids, values, tops, strict=True):
        token = tokenizer.decode([token_id])
        if cut_at is not None and length >= cut_at:
            break
        length += len(token)
        entries.append({"token": token, "logprob": value,
                        "top_logprobs": [{"token": tokenizer.decode([t]), "logprob": v}
                                         for t, v in top]})
    return entries


def chat_logprobs(stored: list[dict[str, Any]]) -> dict[str, Any]:
    def entry(item: dict[str, Any]) -> dict[str, Any]:
        return {"token": item["token"], "logprob": item["logprob"],
                "bytes": list(item["token"].encode())}

    return {"content": [entry(item) | {"top_logprobs": [entry(t) for t in item["top_logprobs"]]}
                        for item in stored], "refusal": None}


def completion_logprobs(stored: list[dict[str, Any]]) -> dict[str, Any]:
    offsets, offset = [], 0
    for item in stored:
        offsets.append(offset)
        offset += len(item["token"])
    return {"tokens": [item["token"] for item in stored],
            "token_logprobs": [item["logprob"] for item in stored],
            "top_logprobs": [{t["token"]: t["logprob"] for t in item["top_logprobs"]}
                             for item in stored],
            "text_offset": offsets}
