"""The order in which ingest places a window of lines into chunks, so that lines whose
prompts begin alike share chunks, and so workers (each with its own prompt prefix cache:
dinfer_engine/prefix_cache.py) compute a shared prefix once per chunk instead of once per chunk
of every line order (docs/adr/028-prefix-cache.md).

The service has no tokenizer at ingest, so a prompt's prefix is approximated by its text:
the text the engine's prompt begins with (a prompt; messages as `role: content` lines,
which every chat template renders in the same order, after a line's tools: formats/
chat_prompt.py's plain rendering), its UTF-8 bytes cut into pieces
that end at PIECE_ENDS. A line's `PrefixKey` is the chain of its pieces' digests (each covers the
pieces before it, so equal digests at depth d mean equal first d pieces).

A window's lines are placed in the order of a trie over those chains whose branches come
in the order of their first line: lines that share leading pieces sit together, the
longer the shared run the closer, and a window whose lines do not interleave keeps its
input order exactly (a template's vars file runs as before). Only the chunk a line goes to
changes: items keep their line numbers, and results are always read by line, so output
stays in input order; chunks are cut by cost in this order as before, so fair share
charges the same chunks."""

from __future__ import annotations

import hashlib
from typing import Any

from dinfer_batch.formats.lines.chat_prompt import plain_lines

# where the pieces end: fine where prefixes are short (a block of LLaDA2's 32 tokens is
# about 128 characters), coarser as they grow, up to a 2,000-token instruction prefix;
# lines that share all 8,192 characters sit together in input order
PIECE_ENDS = (64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
DIGEST_BYTES = 8

PrefixKey = bytes  # DIGEST_BYTES per piece, chained


def prefix_key(request: dict[str, Any]) -> PrefixKey:
    """The chained digests of the leading pieces of the request's prompt text."""
    prompt = request.get("prompt")
    text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt)) \
        if prompt is not None else plain_lines(request["messages"], request.get("tools"))
    data = text[:PIECE_ENDS[-1]].encode(errors="surrogatepass")
    chain, digest, start = [], b"", 0
    for end in PIECE_ENDS:
        if start >= len(data):
            break
        digest = hashlib.blake2b(digest + data[start:end], digest_size=DIGEST_BYTES).digest()
        chain.append(digest)
        start = end
    return b"".join(chain)


def placing_order(keys: list[PrefixKey]) -> list[int]:
    """Indices of `keys` (a window's lines in input order) in trie order, each branch
    placed at its first line; a key's end is a branch too (placed at the first line of
    that key), so lines of equal keys sit together, in input order."""
    first: dict[bytes, int] = {}  # a chain's digest at some depth -> its first line
    ends: dict[bytes, int] = {}  # a whole key -> its first line
    ranks = []
    for index, key in enumerate(keys):
        ranks.append((*(first.setdefault(key[end - DIGEST_BYTES:end], index)
                        for end in range(DIGEST_BYTES, len(key) + 1, DIGEST_BYTES)),
                      ends.setdefault(key, index)))
    return sorted(range(len(keys)), key=lambda index: (ranks[index], index))
