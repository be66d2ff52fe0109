"""Loading a checkpoint's tokenizer, without torch: the service checks prompt lengths with
it in processes that never run the model (`submit`, the API), where importing torch would
cost more memory than the work itself."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from dinfer_engine.models.config import CheckpointError

GENERIC_FAST = "PreTrainedTokenizerFast"


def load_tokenizer(directory: Path) -> Any:
    """The checkpoint's tokenizer as AutoTokenizer would load it, local files only. A
    checkpoint that names the generic fast tokenizer gets that class directly (what
    AutoTokenizer resolves it to), because AutoTokenizer's import pulls in torch."""
    from transformers.utils import logging as hf_logging

    # transformers reads config.json too and warns that it does not know "llada"; the
    # tokenizer is all we take from it, so that warning is noise here
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        if _generic_fast(directory):
            from transformers import PreTrainedTokenizerFast

            return PreTrainedTokenizerFast.from_pretrained(directory, local_files_only=True)
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{directory}: cannot load the tokenizer ({exc})") from exc
    finally:
        hf_logging.set_verbosity(verbosity)


@dataclass(frozen=True)
class TokenCounter:
    """Counts tokens as the checkpoint's transformers tokenizer does when called on texts
    (special tokens added, no truncation, no padding). `backend` is the fast tokenizer's
    `tokenizers` object; `slow` a tokenizer that has none (counted through transformers)."""

    backend: Tokenizer | None
    slow: Any = None
    longest: int = 1  # UTF-8 bytes of the vocabulary's longest token (chars_per_token)

    def counts(self, texts: list[str]) -> list[int]:
        if self.backend is None:
            return [len(ids) for ids in self.slow(texts)["input_ids"]]
        return [len(encoding.ids) for encoding in self.backend.encode_batch(texts)]

    def chars_per_token(self) -> int:
        """At most this many characters of a text end up in one token, so a text has at
        least len(text) // this tokens, known without tokenizing it: every character
        is at least one UTF-8 byte and every token covers at most `longest` bytes of the
        text (a BPE, Unigram or WordPiece model drops none of it). A normaliser may
        shorten the text first (NFC composes characters): four times the slack then."""
        shrinks = self.backend is None or self.backend.normalizer is not None
        return self.longest * (4 if shrinks else 1)

    def bound_extra(self) -> int | None:
        """Tokens a text may have beyond its UTF-8 length, or None when no bound is known:
        with no normaliser (nothing rewrites the text), every token of a BPE, Unigram or
        WordPiece model covers at least one byte of it, so a text has at most its UTF-8
        length in tokens, plus one (a prepended word marker) plus the special tokens
        around it."""
        if self.backend is None or self.backend.normalizer is not None:
            return None
        return 1 + self.backend.num_special_tokens_to_add(False)


def load_token_counter(directory: Path) -> TokenCounter:
    """A checkpoint naming the generic fast class is read from its tokenizer.json by the
    `tokenizers` library alone, which is what transformers wraps for that class: importing
    transformers would slow every `submit`'s start (docs/adr/005-scale.md). Other classes
    load through transformers and count with the backend it configured (add_bos_token
    and the like)."""
    backend: Tokenizer | None
    if _generic_fast(directory):
        backend = _read_tokenizer_json(directory / "tokenizer.json")
    else:
        tokenizer = load_tokenizer(directory)
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            return TokenCounter(None, tokenizer, _longest(tokenizer.get_vocab()))
    backend.no_truncation()
    backend.no_padding()
    return TokenCounter(backend, longest=_longest(backend.get_vocab(with_added_tokens=True)))


def _longest(vocab: dict[str, int]) -> int:
    """UTF-8 bytes of the longest token's text (a byte-level BPE writes a byte as one
    character of up to 2 bytes: an overestimate, which keeps the floor a floor)."""
    return max((len(token.encode("utf-8", "surrogatepass")) for token in vocab), default=1)


def _read_tokenizer_json(path: Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust library raises a plain Exception for a bad file
        raise CheckpointError(f"{path}: cannot load the tokenizer ({exc})") from exc


def _generic_fast(directory: Path) -> bool:
    return (_tokenizer_class(directory) == GENERIC_FAST
            and (directory / "tokenizer.json").is_file())


def _tokenizer_class(directory: Path) -> str | None:
    try:
        return json.loads((directory / "tokenizer_config.json").read_text()).get(
            "tokenizer_class")
    except (OSError, ValueError, AttributeError):
        return None
