"""Whose cached prompt blocks a prompt may reuse (docs/adr/040-prefix-cache-owners.md).

A prefix cache (dinfer_engine/prefix_cache.py) keys a prompt's whole blocks by a hash
chain that starts from the prompt's scope: two prompts share a block only when their
scopes are equal as well as their tokens, so one scope's prompts can neither reuse nor
learn about another's blocks. `account` is who the blocks are charged to in the cache's
fair budget (the service: the job's owner, or an administrator's shared salt); `salt`
narrows it further (a line's or job's `cache_salt`). The default scope is the engine's
own callers' (one account, no salt)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class CacheScope:
    account: str = ""
    salt: str = ""

    def seed(self, block_length: int) -> bytes:
        """Where the scope's hash chains start: a digest of the block length, account and
        salt, each length-prefixed so that no two scopes' fields run into each other."""
        fields = [str(block_length), self.account, self.salt]
        data = b"".join(len(f.encode()).to_bytes(4, "little") + f.encode() for f in fields)
        return hashlib.blake2b(data, digest_size=16).digest()
