"""The one wire codec: a message as msgpack plus one raw frame per tensor (zero-copy on send).

A tensor inside any value becomes a msgpack extension holding (frame index,
dtype, shape); its bytes travel as their own ZeroMQ frame, taken straight from
the tensor's memory. Nothing else is accepted: no pickle, no arbitrary objects.

A codec made with `keep_on=DEVICE` (the NCCL edges between hosts, runtime/process/tensor_edges.py)
leaves a tensor already on that device where it is: its frame is the tensor's bytes as a flat
uint8 tensor on the device, which keeps the tensor alive while the frame is held. Any other
tensor goes through host memory as above. A frame that is a tensor decodes on its own device.
"""

from __future__ import annotations

from typing import Any

import msgspec
from wgc.runtime.protocol.messages import Message

_TENSOR_EXT = 1
_SETS_EXT = 2


class Codec:
    def __init__(self, keep_on: str | None = None) -> None:
        self.keep_on = keep_on  # the device whose tensors stay there as frames (None: every tensor to host memory)
        self._decoder = msgspec.msgpack.Decoder(Message, ext_hook=self._ext_hook)
        self._frames: list[Any] = []
        self._out: list[Any] = []  # host-memory views, or flat uint8 tensors on `keep_on`
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

            index = len(self._out)
            if self.keep_on is not None and obj.device == torch.device(self.keep_on):
                t = obj.detach().contiguous()
                self._out.append(t.reshape(-1).view(torch.uint8))
            else:  # reshaped before the byte view: a 0-dim tensor cannot be viewed as bytes
                t = obj.detach().to("cpu").contiguous()
                self._out.append(memoryview(t.reshape(-1).view(torch.uint8).numpy() if t.numel() else b""))
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
        if isinstance(buf, torch.Tensor):  # bytes received straight into a device buffer (an NCCL edge)
            return buf.view(dt).reshape(shape) if buf.numel() else torch.empty(shape, dtype=dt, device=buf.device)
        if len(buf) == 0:
            return torch.empty(shape, dtype=dt)
        return torch.frombuffer(bytearray(buf) if isinstance(buf, bytes) else buf, dtype=dt).reshape(shape)
