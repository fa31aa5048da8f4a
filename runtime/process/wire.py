"""Sockets and framing shared by the worker and the coordinator processes.

One PULL socket per process (bound), one PUSH socket per destination
(connected): ZeroMQ keeps each sender's messages in order. Messages are the
codec's frames: a msgpack head, then one raw frame per tensor, sent without
copying (`copy=False`: ZeroMQ reads the tensor's memory directly). On receipt
a tensor frame is copied once into a buffer the tensor owns, so tensors are
writable and outlive the ZeroMQ message.

Queues are unbounded (HWM 0) and sends never block: flow control belongs to
the protocol (stream credits), not to the sockets.
"""

from __future__ import annotations

from collections.abc import Sequence

import zmq
from wgc.runtime.protocol.codec import Codec
from wgc.runtime.protocol.messages import Message

_RECONNECT_MS = 10  # a peer that binds after we connect is found within this
_RECONNECT_MAX_MS = 1000  # backing off to this while a peer stays away (a rank that died)


def pull_socket(ctx: zmq.Context, endpoint: str | Sequence[str]) -> zmq.Socket:
    """Bound on every endpoint given (a host's IPC path, and its TCP address when there are several hosts)."""
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    try:
        for ep in (endpoint,) if isinstance(endpoint, str) else endpoint:
            try:
                sock.bind(ep)
            except zmq.ZMQError as err:
                raise OSError(f"cannot listen on {ep}: {err.strerror}") from None
    except BaseException:
        sock.close(linger=0)
        raise
    return sock


def push_socket(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RECONNECT_IVL, _RECONNECT_MS)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, _RECONNECT_MAX_MS)
    sock.connect(endpoint)
    return sock


def send(sock: zmq.Socket, codec: Codec, msg: Message) -> None:
    sock.send_multipart(codec.encode(msg), copy=False)


def decode(codec: Codec, frames: list[zmq.Frame]) -> Message:
    head = frames[0].buffer
    tensors = [bytearray(f.buffer) for f in frames[1:]]
    return codec.decode([head, *tensors])
