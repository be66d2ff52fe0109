"""A prompt prefix cache for block diffusion (block-causal families: LLaDA2, LLaDA2.1;
docs/adr/028-prefix-cache.md; DiffusionGemma's causal encoder through found/store:
dinfer_engine/encoder_prefix.py, docs/adr/034-fixed-grid.md).

Under block-causal attention a prompt block's keys/values depend only on the tokens at or
before it, at positions counted from the prompt's first token; so two prompts that begin
with the same whole blocks have the same keys/values there, exactly. The cache keeps each
whole prompt block's keys/values per layer, keyed by a hash chain over the prompt's
blocks (a block's digest covers every token before it, so equal digests mean equal
prefixes). A prompt that ends inside a block shares only its whole blocks: the block
holding its end also holds answer masks.

Every chain starts from its prompt's scope (dinfer_engine/cache_scope.py: the owner, and
a salt that narrows it), so prompts of two scopes never share a block, nor learn whether
the other's blocks are cached (docs/adr/040-prefix-cache-owners.md).

It lives as long as its Engine (one per worker process; each tensor-parallel rank keeps
its own, holding its shard of the heads). Memory is bounded by `budget` bytes counted for
the whole model (every layer's keys and values of all heads), so that every rank evicts
the same entries and the ranks stay in step; a rank holds 1/N of that. The budget is
shared fairly between the scopes' accounts: beyond it, the account holding the most
bytes gives up its least recently used block (the storing account first among equals),
so an account above its share evicts its own blocks and one flooding distinct prompts
cannot push out another's template. Within an account a block's prefix is always more
recent than the block (a lookup touches a chain from its end back to its start), so no
entry outlives the entries before it.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from dinfer_engine.batch import RunningBatch
from dinfer_engine.cache_scope import CacheScope

REUSED = "prefix_tokens_reused"  # the per-row count a finished row carries


@dataclass
class Block:
    keys: list[torch.Tensor]  # per layer [H_kv, block_length, D]
    values: list[torch.Tensor]
    bytes: int  # as counted against the budget
    account: str  # whose share of the budget it takes (CacheScope.account)


class PrefixCache:
    def __init__(self, budget: int, token_bytes: int) -> None:
        """budget: bytes the cache may hold (0: nothing is kept); token_bytes: one token's
        keys/values over every layer and head of the whole model."""
        if budget < 0:
            raise ValueError(f"prefix cache budget must be >= 0 bytes, got {budget}")
        self.budget, self.token_bytes = budget, token_bytes
        self.blocks: dict[bytes, Block] = {}
        # each account's digests, least recently used first, and the bytes it holds
        self.recency: dict[str, OrderedDict[bytes, None]] = {}
        self.held: dict[str, int] = {}
        self.bytes = 0
        self.reused_tokens = 0  # totals since the engine started
        self.evicted_blocks = 0

    def first_forwards(self, batch: RunningBatch) -> dict[int, list[bytes]]:
        """The rows about to run their first forward that have whole prompt blocks, with
        their blocks' digests."""
        fresh = (batch.cached == 0) & (batch.prompt_length >= batch.block_length)
        return {row: self.digests(batch.requests[row].prompt, batch.block_length,
                                  batch.requests[row].scope)
                for row in fresh.nonzero().squeeze(1).tolist()}

    def leaders(self, batch: RunningBatch, chains: dict[int, list[bytes]]
                ) -> Iterator[list[int]]:
        """Restore every row's cached blocks; while rows share a block that is not cached,
        yield one row of each such group (the longest prompt) to run first, whose blocks
        the caller then keeps, so that the others restore them in the next round."""
        rows = list(chains) if self.budget >= batch.block_length * self.token_bytes else []
        while rows:
            groups: dict[bytes, list[int]] = {}
            restored = self.restore_rows(batch, {row: chains[row] for row in rows})
            for row, found in restored.items():
                if found < len(chains[row]):
                    groups.setdefault(chains[row][found], []).append(row)
            shared = [group for group in groups.values() if len(group) > 1]
            first = [max(group, key=lambda r: len(chains[r])) for group in shared]
            if not first:
                return
            yield first
            rows = [row for group in shared for row in group if row not in first]

    def digests(self, prompt: list[int], block_length: int,
                scope: CacheScope = CacheScope()) -> list[bytes]:
        """The hash chain of the prompt's whole blocks, from its scope's seed."""
        digest = scope.seed(block_length)
        chain = []
        for start in range(0, len(prompt) // block_length * block_length, block_length):
            block = array("q", prompt[start:start + block_length]).tobytes()
            digest = hashlib.blake2b(digest + block, digest_size=16).digest()
            chain.append(digest)
        return chain

    def restore(self, batch: RunningBatch, row: int, chain: list[bytes]) -> int:
        """Copy the cached blocks of `chain` that follow the row's cached columns into its
        cache slot and advance batch.cached over them; the row's cached blocks after."""
        return self.restore_rows(batch, {row: chain})[row]

    def restore_rows(self, batch: RunningBatch, chains: dict[int, list[bytes]]
                     ) -> dict[int, int]:
        """restore() for several rows (their chains by row), in one copy per layer for
        all the rows that take the same blocks into the same columns (the rows of a
        template: one write of its blocks into all their slots, not one per row and
        block); each row's cached blocks after."""
        size = batch.block_length
        found_by_row: dict[int, int] = {}
        copies: dict[tuple[int, int, bytes], list[int]] = {}  # (column, first, last) -> rows
        for row, chain in chains.items():
            done = int(batch.cached[row]) // size
            found = done + len(self.found(chain, done))
            found_by_row[row] = found
            if found > done:  # a digest names the whole prefix it ends
                column = int(batch.pad[row]) + done * size
                copies.setdefault((column, done, chain[found - 1]), []).append(row)
                batch.cached[row] = found * size
                batch.state[REUSED][row] += (found - done) * size
                self.reused_tokens += (found - done) * size
        for (column, done, _), rows in copies.items():
            found = found_by_row[rows[0]]
            self._copy(batch, rows, column, chains[rows[0]][done:found])
        return found_by_row

    def _copy(self, batch: RunningBatch, rows: list[int], column: int,
              digests: list[bytes]) -> None:
        """Write the cached blocks `digests`, one after the other, into the slots of
        `rows` from the batch's column `column` on."""
        cache = batch.cache
        assert cache is not None
        slots = batch.slot[rows]
        blocks = [self.blocks[d] for d in digests]
        start = cache.offset + column
        columns = slice(start, start + len(blocks) * batch.block_length)
        for layer in range(len(cache.keys)):
            keys, values = cache.layer(layer, blocks[0].keys[layer][None])
            keys[slots, :, columns] = torch.cat([b.keys[layer] for b in blocks], dim=1)
            values[slots, :, columns] = torch.cat([b.values[layer] for b in blocks], dim=1)

    def keep(self, batch: RunningBatch, row: int, chain: list[bytes]) -> None:
        """Take the row's whole prompt blocks (in its cache slot after its first forward)
        into the cache, evicting the least recently used blocks beyond the budget."""
        cache, size = batch.cache, batch.block_length
        assert cache is not None
        slot, start = int(batch.slot[row]), cache.offset + int(batch.pad[row])

        def block(index: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
            columns = slice(start + index * size, start + (index + 1) * size)
            return ([k[slot, :, columns].clone() for k in cache.keys if k is not None],
                    [v[slot, :, columns].clone() for v in cache.values if v is not None])
        self.store(chain, block, size, batch.requests[row].scope.account)

    def found(self, chain: list[bytes], done: int = 0) -> list[Block]:
        """The cached blocks of `chain` from index `done` up to the first one missing;
        the chain's cached blocks become the most recent."""
        found = done
        while found < len(chain) and chain[found] in self.blocks:
            found += 1
        self._touch(chain[:found])
        return [self.blocks[digest] for digest in chain[done:found]]

    def store(self, chain: list[bytes],
              block: Callable[[int], tuple[list[torch.Tensor], list[torch.Tensor]]],
              block_length: int, account: str = "") -> None:
        """Keep the blocks of `chain` not cached yet (block(index): their keys and values
        per layer), charged to `account` (the chain's scope's), then evict beyond the
        budget: the least recently used block of the account holding the most."""
        block_bytes = block_length * self.token_bytes
        for index, digest in enumerate(chain):
            if digest in self.blocks or block_bytes > self.budget:
                continue
            self.blocks[digest] = Block(*block(index), block_bytes, account)
            self.recency.setdefault(account, OrderedDict())[digest] = None
            self.held[account] = self.held.get(account, 0) + block_bytes
            self.bytes += block_bytes
        self._touch(chain)
        while self.bytes > self.budget:
            self._evict(max(self.held, key=lambda a: (self.held[a], a == account)))

    def _evict(self, account: str) -> None:
        """Drop the account's least recently used block."""
        digest, _ = self.recency[account].popitem(last=False)
        gone = self.blocks.pop(digest)
        self.bytes -= gone.bytes
        self.held[account] -= gone.bytes
        if not self.recency[account]:
            del self.recency[account], self.held[account]
        self.evicted_blocks += 1

    def held_by(self, account: str) -> int:
        """The bytes the account's blocks take."""
        return self.held.get(account, 0)

    def stats(self) -> dict[str, int]:
        return {"prefix_cache_bytes": self.bytes, "prefix_cache_blocks": len(self.blocks),
                "prefix_tokens_reused": self.reused_tokens,
                "prefix_blocks_evicted": self.evicted_blocks}

    def _touch(self, chain: list[bytes]) -> None:
        for digest in reversed(chain):
            if digest in self.blocks:
                self.recency[self.blocks[digest].account].move_to_end(digest)
