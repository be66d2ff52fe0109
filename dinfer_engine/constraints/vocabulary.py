"""The bytes each token of a tokenizer spells, and the vocabulary the grammar engine
(llguidance) matches answers over.

Byte-level BPE (GPT-2, LLaDA) writes each byte as a printable character; SentencePiece
writes a space as U+2581 and unknown bytes as <0xNN>; other tokenizers spell their
tokens as written. Special tokens (mask, padding, end of text, ...) spell nothing: a
constrained row never chooses them, except the stop tokens a grammar allows at its
end."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any

import numpy as np

BYTE_TOKEN_LENGTH = 6  # "<0xNN>"
SHORTEST_FIRST = 64  # tokens of `by_length` a search for the shortest allowed looks at first


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


def is_byte_level(tokenizer: Any) -> bool:
    """Whether the tokenizer writes bytes as GPT-2's printable characters (its decoder is
    ByteLevel)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = type(backend.decoder).__name__ if backend is not None and backend.decoder \
        else ""
    return "ByteLevel" in decoder


def spelling(token: str, byte_level: bool) -> bytes:
    """The bytes one vocabulary entry spells: a byte-level BPE's characters mapped back to
    bytes, SentencePiece's <0xNN> as that byte and U+2581 as a space, else its UTF-8."""
    table = _byte_level_table()
    if byte_level and all(c in table for c in token):
        return bytes(table[c] for c in token)
    if len(token) == BYTE_TOKEN_LENGTH and token.startswith("<0x") and token.endswith(">"):
        return bytes([int(token[3:5], 16)])
    return token.replace("\u2581", " ").encode("utf-8", "surrogatepass")


def special_ids(tokenizer: Any) -> set[int]:
    """Ids of the special tokens (named ones and added tokens marked special)."""
    special = set(getattr(tokenizer, "all_special_ids", []))
    added = getattr(tokenizer, "added_tokens_decoder", {})
    return special | {i for i, token in added.items() if getattr(token, "special", False)}


def spell_ids(tokenizer: Any, ids: list[int]) -> list[bytes]:
    """The bytes each of `ids` spells, in order (special tokens spell nothing): what the
    tokens of an answer contribute, byte for byte, even where a character is split across
    tokens or a decoder drops a leading space."""
    byte_level, special = is_byte_level(tokenizer), special_ids(tokenizer)
    return [b"" if i in special else spelling(token, byte_level)
            for i, token in zip(ids, tokenizer.convert_ids_to_tokens(ids), strict=True)]


def token_bytes(tokenizer: Any) -> dict[int, bytes]:
    """Every ordinary token's id -> the bytes it spells (special tokens left out)."""
    byte_level, special = is_byte_level(tokenizer), special_ids(tokenizer)
    spelled = {index: spelling(token, byte_level)
               for token, index in tokenizer.get_vocab().items() if index not in special}
    return {i: b for i, b in spelled.items() if b}


class Vocabulary:
    """A model's vocabulary as the grammar engine sees it: the bytes each of its `size`
    token ids spells, the stop tokens that may end an answer, and llguidance's token-level
    preprocessing of them (`LLTokenizer`: a trie of the tokens' bytes), built on first use
    and then once per process for each distinct vocabulary (about a second at 126,464
    tokens). Pickled for tensor-parallel ranks as its bytes; a rank builds its own
    tokenizer once.

    Tokens that spell nothing (special tokens) and the stop tokens are llguidance's
    special tokens (a 0xFF first byte): never allowed inside an answer; the stop tokens
    only where the grammar accepts. `filler` is the token written where an answer cannot
    go on at all (a vocabulary that cannot spell what the grammar requires)."""

    def __init__(self, spelled: dict[int, bytes], stop_ids: list[int], size: int,
                 mask_id: int) -> None:
        stops = set(stop_ids)
        self.tokens = [spelled[i] if i in spelled and i not in stops else b"\xff<%d>" % i
                       for i in range(size)]
        self.stop_ids = sorted(stops)
        self.special = [i for i in range(size) if i not in spelled or i in stops]
        fillers = [i for i in self.special if i not in stops and i != mask_id]
        if not fillers:
            raise ValueError("constraints need a token that spells nothing besides the stop "
                             "and mask tokens (padding, unknown...)")
        self.filler = fillers[0]
        # bytes each token spells (special ones: never short)
        self.lengths = np.array([len(t) if i not in stops and i in spelled else 1 << 20
                                 for i, t in enumerate(self.tokens)], dtype=np.int64)
        # token ids by length, ties by id: any mask's shortest allowed tokens without a sort
        self.by_length = np.argsort(self.lengths, kind="stable")
        self.digest = hashlib.sha256(b"\0".join([*self.tokens, repr(
            (self.stop_ids, self.filler)).encode()])).hexdigest()

    @property
    def size(self) -> int:
        return len(self.tokens)

    def shortest(self, mask: np.ndarray, count: int) -> np.ndarray:
        """The first `count` tokens of `by_length` that `mask` allows: looked for among
        the shortest tokens first, widening only while too few are found (most masks
        allow some token of a few bytes; a pass over a 126,464-token vocabulary costs a
        millisecond)."""
        end = SHORTEST_FIRST
        while True:
            head = self.by_length[:end]  # a prefix: its allowed tokens come first
            found = head[mask[head]]
            if len(found) >= count or end >= self.size:
                return found[:count]
            end *= 8

    def tokenizer(self) -> Any:
        """llguidance's LLTokenizer of this vocabulary (built once per process)."""
        return _tokenizer(self)


_tokenizers: dict[str, Any] = {}


def _tokenizer(vocabulary: Vocabulary) -> Any:
    from llguidance import LLTokenizer, TokenizerWrapper

    if vocabulary.digest not in _tokenizers:
        _tokenizers[vocabulary.digest] = LLTokenizer(
            TokenizerWrapper(_Spelling(vocabulary)), n_vocab=vocabulary.size,
            eos_token=vocabulary.stop_ids)
    return _tokenizers[vocabulary.digest]


class _Spelling:
    """What llguidance's TokenizerWrapper reads from a tokenizer: the tokens' bytes, and
    text encoded into tokens (llguidance tokenizes the bytes a grammar forces, and masks
    with them): longest token first, up to the first byte no token spells."""

    bos_token_id = None

    def __init__(self, vocabulary: Vocabulary) -> None:
        self.eos_token_id = vocabulary.stop_ids[0]
        self.tokens = vocabulary.tokens
        self.special_token_ids = vocabulary.special
        special = set(vocabulary.special)
        self._ids = {b: i for i, b in enumerate(vocabulary.tokens) if i not in special}
        self._longest = max(map(len, self._ids), default=1)

    def __call__(self, text: bytes | str) -> list[int]:
        data = text.encode() if isinstance(text, str) else text
        tokens, at = [], 0
        while at < len(data):
            for end in range(min(len(data), at + self._longest), at, -1):
                if data[at:end] in self._ids:
                    tokens.append(self._ids[data[at:end]])
                    at = end
                    break
            else:
                break
        return tokens
