"""Log-probabilities: the engine's per-token values as stored with an item, and the two
shapes OpenAI answers them in (chat `content` entries; legacy completions' parallel
lists). For a diffusion model a token's log-probability is the one it had at the
iteration that committed it (see dinfer_engine.GenerationConfig)."""

from __future__ import annotations

import codecs
from typing import Any

from dinfer_engine.constraints.vocabulary import spell_ids


def token_text(spelled: bytes) -> str:
    """A token's text: its bytes as UTF-8, or OpenAI's `bytes:\\xNN...` spelling for a
    token that holds part of a character (a byte-fallback or byte-level piece)."""
    try:
        return spelled.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{byte:02x}" for byte in spelled)


def _entry(spelled: bytes, value: float) -> dict[str, Any]:
    return {"token": token_text(spelled), "logprob": value, "bytes": list(spelled)}


def token_logprobs(result: Any, tokenizer: Any,
                   cut_at: int | None = None) -> list[dict[str, Any]] | None:
    """[{"token", "logprob", "bytes", "top_logprobs": [...]}] for the answer's tokens (up
    to the first that starts at or after character `cut_at` of the text, where a stop
    string cut it short); None when not asked for. A token's text and bytes are what it
    spells in the vocabulary (dinfer_engine.constraints.vocabulary.spell_ids), so the
    bytes of the entries join to the answer's bytes even where a tokenizer splits a
    character across tokens (byte fallback, byte-level BPE) or decodes a token alone
    without its leading space (SentencePiece)."""
    values = getattr(result, "logprobs", None)
    if values is None:
        return None
    ids = list(result.token_ids)
    tops = getattr(result, "top_logprobs", None) or [[] for _ in values]
    spelled = spell_ids(tokenizer, ids)
    alternatives = [t for top in tops for t, _ in top]
    spelled_top = dict(zip(alternatives, spell_ids(tokenizer, alternatives), strict=True))
    end = _cut_byte(spelled, tokenizer.decode(ids, skip_special_tokens=True), cut_at)
    entries, length = [], 0
    for spelling, value, top in zip(spelled, values, tops, strict=True):
        if end is not None and length >= end:
            break
        length += len(spelling)
        entries.append(_entry(spelling, value) | {
            "top_logprobs": [_entry(spelled_top[t], v) for t, v in top]})
    return entries


def _cut_byte(spelled: list[bytes], text: str, cut_at: int | None) -> int | None:
    """The byte of the spelled answer where character `cut_at` of its decoded text falls
    (a decoder that drops the answer's leading space shifts the text by one)."""
    if cut_at is None:
        return None
    whole = b"".join(spelled).decode("utf-8", "replace")
    lead = len(whole) - len(text) if whole.endswith(text) else 0
    return len(whole[:cut_at + lead].encode("utf-8"))


def chat_logprobs(stored: list[dict[str, Any]]) -> dict[str, Any]:
    def entry(item: dict[str, Any]) -> dict[str, Any]:
        # items stored before the bytes were kept: the text's UTF-8
        return {"token": item["token"], "logprob": item["logprob"],
                "bytes": item.get("bytes", list(item["token"].encode()))}

    return {"content": [entry(item) | {"top_logprobs": [entry(t) for t in item["top_logprobs"]]}
                        for item in stored], "refusal": None}


def completion_logprobs(stored: list[dict[str, Any]]) -> dict[str, Any]:
    """text_offset: the characters of the answer before each token (a character split
    across tokens counts once it is whole)."""
    offsets, offset = [], 0
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for item in stored:
        offsets.append(offset)
        offset += len(decoder.decode(bytes(item.get("bytes", item["token"].encode()))))
    return {"tokens": [item["token"] for item in stored],
            "token_logprobs": [item["logprob"] for item in stored],
            "top_logprobs": [{t["token"]: t["logprob"] for t in item["top_logprobs"]}
                             for item in stored],
            "text_offset": offsets}
