"""A message whose tensors cross an edge, on the wire: the ZeroMQ header, which frames ride the group,
and the receiver's arrival order. No torch here: the backends and devices are tensor_edges.py's.

The header is one ZeroMQ multipart message:

    HEADER, sender rank, the codec's msgpack head, route, the frames that stay on ZeroMQ...

`route` has one comma-separated token per tensor frame, in the codec's order: `z` for a frame that
follows on ZeroMQ, or its size in bytes for one that comes on the edge's group (each of those is
one send, in order, on the group of that direction; zero-size frames are never sent). A receiver
posts its receives only once the header is in: a Gloo or NCCL operation whose peer never posts its
half waits out the group timeout and tears the pair down.

Order: a worker delivers messages in arrival order, so everything that arrives behind a header
waits until that header's payload is in (`InOrder`): each sender's ZeroMQ order, which the protocol
relies on, holds whatever route a payload takes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HEADER = b"wgc-tensor-header"
INLINE = "z"


def is_host_frame(frame: Any) -> bool:
    """A frame in host memory (the codec's bytes or memoryview), as opposed to a device tensor frame."""
    return isinstance(frame, (bytes, bytearray, memoryview))


def frame_bytes(frame: Any) -> int:
    if isinstance(frame, memoryview):
        return frame.nbytes
    if isinstance(frame, (bytes, bytearray)):
        return len(frame)
    return int(frame.numel())  # a flat uint8 tensor


def split(frames: list[Any], host_frames: bool) -> tuple[bytes, list[Any], list[Any]]:
    """(route, the frames that stay on ZeroMQ, the frames for the group) of an encoded message.

    Device tensor frames always go on the group; host-memory frames too when `host_frames` (Gloo),
    else they stay ZeroMQ frames (NCCL carries device memory only)."""
    tokens, inline, payload = [], [], []
    for frame in frames[1:]:
        if host_frames or not is_host_frame(frame):
            tokens.append(str(frame_bytes(frame)))
            payload.append(frame)
        else:
            tokens.append(INLINE)
            inline.append(frame)
    return ",".join(tokens).encode(), inline, payload


def header(rank: int, head: Any, route: bytes, inline: list[Any]) -> list[Any]:
    return [HEADER, str(rank).encode(), head, route, *inline]


@dataclass
class Pending:
    """A message whose payload is still on its way: `parts` holds every tensor frame in order, None
    where one comes on the group (`sizes`: those frames' sizes, in order) until `fill`."""

    source: int
    head: bytes
    parts: list[Any]
    sizes: list[int]
    done: bool = False
    error: str = ""

    @property
    def waiting(self) -> bool:
        return not self.done and not self.error

    def fill(self, received: list[Any]) -> None:
        """The group's frames are in (called from the edge's receive thread)."""
        if len(received) != len(self.sizes):
            raise ValueError(f"{len(received)} frames for {len(self.sizes)} expected")
        it = iter(received)
        self.parts = [next(it) if p is None else p for p in self.parts]
        self.done = True  # last: the worker reads `parts` only once it sees `done`

    def frames(self) -> list[Any]:
        return [self.head, *self.parts]


def parse_header(frames: list[Any]) -> Pending:
    """The Pending message a header announces (`frames` as ZeroMQ delivers them: `.bytes`, `.buffer`).

    ZeroMQ frames are copied into buffers the tensors own, as wire.decode does, so they are
    writable and outlive the ZeroMQ message."""
    source, head, route = int(frames[1].bytes), frames[2].bytes, frames[3].bytes.decode()
    inline = iter(frames[4:])
    parts: list[Any] = []
    sizes: list[int] = []
    for token in route.split(",") if route else []:
        if token == INLINE:
            frame = next(inline, None)
            if frame is None:
                raise ValueError(f"a tensor header from rank {source} lacks ZeroMQ frames its route {route!r} names")
            parts.append(bytearray(frame.buffer))
        else:
            parts.append(None)
            sizes.append(int(token))
    if next(inline, None) is not None:
        raise ValueError(f"a tensor header from rank {source} carries more ZeroMQ frames than its route {route!r}")
    return Pending(source, head, parts, sizes)


@dataclass
class InOrder:
    """Messages in arrival order; a Pending one still waiting holds back every message behind it."""

    items: deque[Any] = field(default_factory=deque)

    def ready(self) -> list[Any]:
        out = []
        while self.items and not (isinstance(self.items[0], Pending) and self.items[0].waiting):
            out.append(self.items.popleft())
        return out

    def released(self, decode: Callable[[Pending], Any]) -> list[Any]:
        """The messages that may go now, each Pending one decoded by `decode`; one whose payload
        failed is dropped (its peer is gone: the host's detector reports it, and the request fails)."""
        return [decode(m) if isinstance(m, Pending) else m for m in self.ready()
                if not (isinstance(m, Pending) and m.error)]
