"""The one wire codec: a message as msgpack plus one raw frame per tensor (zero-copy on send).

A tensor inside any value becomes a msgpack extension holding (frame index,
dtype, shape); its bytes travel as their own ZeroMQ frame, taken straight from
the tensor's memory. Nothing else is accepted: no pickle, no arbitrary objects.
"""

from __future__ import annotations

from typing import Any

import msgspec
from wgc.runtime.protocol.messages import Message

_TENSOR_EXT = 1
_SETS_EXT = 2


class Codec:
    def __init__(self) -> None:
        self._decoder = msgspec.msgpack.Decoder(Message, ext_hook=self._ext_hook)
        self._frames: list[Any] = []
        self._out: list[memoryview] = []
        self._encoder = msgspec.msgpack.Encoder(enc_hook=self._enc_hook)

    def encode(self, msg: Message) -> list[Any]:
        self._out = []
        head = self._encoder.encode(msg)
        frames: list[Any] = [head, *self._out]
        self._out = []
        return frames

    def decode(self, frames: list[Any]) -> Message:
        self._frames = list(frames[1:])
        try:
            return self._decoder.decode(frames[0])
        finally:
            self._frames = []

    def _enc_hook(self, obj: Any) -> Any:
        if type(obj).__module__.startswith("torch"):
            import torch

            t = obj.detach().to("cpu").contiguous()
            index = len(self._out)
            raw = t.view(torch.uint8).reshape(-1).numpy() if t.numel() else b""
            self._out.append(memoryview(raw))
            meta = msgspec.msgpack.encode([index, str(t.dtype).removeprefix("torch."), list(t.shape)])
            return msgspec.msgpack.Ext(_TENSOR_EXT, meta)
        if isinstance(obj, (set, frozenset)):
            return msgspec.msgpack.Ext(_SETS_EXT, msgspec.msgpack.encode(sorted(obj, key=repr)))
        raise TypeError(f"cannot send a {type(obj).__name__} between ranks")

    def _ext_hook(self, code: int, data: memoryview) -> Any:
        if code == _SETS_EXT:
            return frozenset(msgspec.msgpack.decode(data))
        if code != _TENSOR_EXT:
            raise msgspec.ValidationError(f"unknown extension type {code}")
        import torch

        index, dtype, shape = msgspec.msgpack.decode(data)
        buf = self._frames[index]
        dt = getattr(torch, dtype)
        if len(buf) == 0:
            return torch.empty(shape, dtype=dt)
        return torch.frombuffer(bytearray(buf) if isinstance(buf, bytes) else buf, dtype=dt).reshape(shape)
