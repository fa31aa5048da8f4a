"""Which KV pages hold which token prefix: the index behind automatic prefix caching.

A full page is named by the digest of every token from the start of its sequence through its own
last token (a chain: page i's digest hashes page i-1's digest with page i's tokens), so two pages
share a name only when their whole prefixes are equal, and a hit on page i implies hits on pages
0..i-1. The digest is BLAKE2b-128 over the token ids as int64: a collision would silently serve
another prompt's keys, so a 64-bit Python hash is not enough. Pure data: no torch.

Only sequences made of tokens at positions 0, 1, 2, ... are published (the KV of a page depends on
its tokens and their rope positions; a block of image latents at one position is not a token
prefix), and only by the engine, after the forward that wrote them succeeded.
"""

from __future__ import annotations

import hashlib
from array import array

ROOT = b""  # the digest before the first page


def chain_digests(tokens: list[int], page_size: int, start: int = 0, parent: bytes = ROOT) -> list[bytes]:
    """Digests of the full pages of `tokens` from page `start` on, `parent` being page start-1's."""
    out: list[bytes] = []
    for first in range(start * page_size, len(tokens) - page_size + 1, page_size):
        h = hashlib.blake2b(parent, digest_size=16)
        h.update(array("q", tokens[first:first + page_size]).tobytes())
        parent = h.digest()
        out.append(parent)
    return out


class PrefixIndex:
    """digest ↔ page, one page per digest and one digest per page."""

    def __init__(self) -> None:
        self._page_of: dict[bytes, int] = {}
        self._digest_of: dict[int, bytes] = {}

    def __len__(self) -> int:
        return len(self._digest_of)

    def has(self, page: int) -> bool:
        return page in self._digest_of

    def publish(self, page: int, digest: bytes) -> bool:
        if digest in self._page_of or page in self._digest_of:
            return False
        self._page_of[digest] = page
        self._digest_of[page] = digest
        return True

    def forget(self, page: int) -> None:
        digest = self._digest_of.pop(page, None)
        if digest is not None:
            del self._page_of[digest]

    def match(self, digests: list[bytes]) -> list[int]:
        pages: list[int] = []
        for digest in digests:
            page = self._page_of.get(digest)
            if page is None:
                break
            pages.append(page)
        return pages
