"""Streams of one request: chunk policies (policy.py) and the per-(request, stream) buffer (buffer.py)."""

from wgc.runtime.streams.buffer import AFTER_END, AT_END, ENDED, PAD, WAITING, Chunk, PushStatus, StreamBuffer
from wgc.runtime.streams.policy import POLICY_NAMES, ChunkPolicy, make_policy

__all__ = [
    "AFTER_END",
    "AT_END",
    "ENDED",
    "PAD",
    "POLICY_NAMES",
    "WAITING",
    "Chunk",
    "ChunkPolicy",
    "PushStatus",
    "StreamBuffer",
    "make_policy",
]
