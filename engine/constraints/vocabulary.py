"""The bytes each token of a tokenizer spells, for building automata over the vocabulary.

Byte-level BPE (GPT-2, LLaDA) writes each byte as a printable character; SentencePiece
writes a space as U+2581 and unknown bytes as <0xNN>; other tokenizers spell their
tokens as written. Special tokens (mask, padding, end of text, ...) spell nothing: a
constrained row never chooses them, except the stop tokens an automaton allows at its
end."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

BYTE_TOKEN_LENGTH = 6  # "<0xNN>"


@lru_cache(maxsize=1)
def _byte_level_table() -> dict[str, int]:
    """GPT-2's printable character for each byte, inverted."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


def token_bytes(tokenizer: Any) -> dict[int, bytes]:
    """Every ordinary token's id -> the bytes it spells (special tokens left out)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = type(backend.decoder).__name__ if backend is not None and backend.decoder \
        else ""
    byte_level = "ByteLevel" in decoder
    table = _byte_level_table()
    special = set(getattr(tokenizer, "all_special_ids", []))
    added = getattr(tokenizer, "added_tokens_decoder", {})
    special |= {i for i, token in added.items() if getattr(token, "special", False)}
    spelled: dict[int, bytes] = {}
    for token, index in tokenizer.get_vocab().items():
        if index in special:
            continue
        if byte_level and all(c in table for c in token):
            spelled[index] = bytes(table[c] for c in token)
        elif (len(token) == BYTE_TOKEN_LENGTH and token.startswith("<0x")
              and token.endswith(">")):
            spelled[index] = bytes([int(token[3:5], 16)])
        else:
            spelled[index] = token.replace("\u2581", " ").encode("utf-8", "surrogatepass")
    return {i: b for i, b in spelled.items() if b}
