"""Full-vocabulary float64 work (a position's softmax normaliser, its draws, its argmax)
done one slice of positions at a time, so that what a batch holds beyond its logits is
bounded by SLICE_BYTES whatever its rows and vocabulary (a block's float64 copy and its
exp over all rows at once grew with rows x vocabulary: docs/adr/041).

Each position's reductions are torch's, bit for bit, as over the whole batch: torch
reduces every position of a tensor alone in one pass unless the tensor has a single
position, which it splits over its threads (another order of the same sums). So a slice
never holds one position unless the whole work is that one position."""

from __future__ import annotations

from dinfer_engine.constraints.grammar import KEPT_MASK_BYTES, MATCHER_BYTES
from dinfer_engine.parallel import vocab

SLICE_BYTES = 64 * 2**20  # float64 scores of one slice (at least two positions)


def slices(count: int, item_bytes: int, budget: int = SLICE_BYTES) -> list[slice]:
    """Consecutive slices covering range(count), each of at most `budget` bytes of
    `item_bytes` items but at least two items (see the module's doc): a lone item at
    the end joins the slice before it."""
    per = max(2, budget // max(item_bytes, 1))
    bounds = list(range(0, count, per)) + [count] if count else [0, 0]
    if len(bounds) > 2 and bounds[-1] - bounds[-2] == 1:
        del bounds[-2]
    return [slice(start, stop) for start, stop in zip(bounds, bounds[1:], strict=False)]


def float64_bytes(width: int) -> int:
    """Bytes of one position's float64 scores over the whole vocabulary, of which this
    rank holds `width`: the same on every tensor-parallel rank (they slice alike, so
    their collectives pair up)."""
    split = vocab.current()
    return 8 * (width if split is None else split.total)


def constrained_row_bytes(vocabulary: int, block_length: int,
                          grammar_bytes: int = MATCHER_BYTES) -> int:
    """A documented bound on what one constrained row adds to a CPU run's peak memory
    (docs/adr/041-constrained-row-memory.md): its block's logits and what the allocator
    keeps of the slices' copies, within 24 bytes per block position and vocabulary
    token, and its witness: the masks its matcher keeps (grammar.KEPT_MASK_BYTES), its
    matcher (`grammar_bytes`: Grammar.bytes, the grammar's text and one matcher) and two
    boolean rows over the vocabulary."""
    return 24 * block_length * vocabulary + KEPT_MASK_BYTES + grammar_bytes + 2 * vocabulary
