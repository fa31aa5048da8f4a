"""The device half of a tensor edge: where receive buffers live, which stream an edge's operations
run on, and when a payload is finished with. Everything else about an edge (threads, groups, order)
is one code path for both backends (tensor_edges.py); only these few calls differ.

`HostSide` (Gloo): host buffers; Gloo's `wait()` returns once the bytes are sent or in.

`CudaSide` (NCCL; written but unverified: no GPU was available to run it):
- each edge thread runs its operations on a CUDA stream of its own, so the worker's compute stream
  never waits behind a transfer (ProcessGroupNCCL orders its internal stream after the calling
  thread's current stream, and `wait()` orders the current stream after the operation);
- a send first waits, on the edge's stream, for an event the worker recorded on its compute
  stream when it handed the payload over, so the bytes are read only once they are written;
- `finish` blocks the edge's thread (never the worker) until the edge's stream is done: only then
  does the send thread drop its hold on the payload (the tensor stays alive until it is sent),
  and only then does a received buffer reach the worker;
- a receive buffer is allocated on the receiver's device from the edge stream's pool and marked
  as used by the compute stream (`record_stream`), so the allocator does not hand its memory to
  the next receive while compute may still read it.

What the CUDA half assumes and no GPU has confirmed yet (bench/gpu_check.sh runs its tests): the
stream ordering of ProcessGroupNCCL's point-to-point operations stated above; that an edge's
transfer and a tensor-parallel collective on the same GPU, which belong to different NCCL
communicators, can make progress at the same time (NCCL warns that concurrent communicators may
deadlock when they cannot); and, for two "hosts" on one GPU in the tests, distinct NCCL_HOSTIDs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any


class HostSide:
    """Host buffers, no streams: what Gloo (and CI) runs."""

    device = "cpu"

    def buffer(self, n: int) -> Any:
        import torch

        return torch.empty(n, dtype=torch.uint8)

    def new_stream(self) -> Any:
        return None

    def on(self, stream: Any) -> AbstractContextManager[Any]:
        return nullcontext()

    def mark(self) -> Any:
        return None

    def after(self, mark: Any) -> None:
        pass

    def finish(self, stream: Any) -> None:
        pass

    def hand_over(self, bufs: list[Any]) -> None:
        pass


class CudaSide(HostSide):
    """Buffers on the rank's GPU, a stream per edge thread. Unverified: no GPU was available."""

    def __init__(self, device: str) -> None:
        import torch

        self.device = device
        self._dev = torch.device(device)
        self.compute = torch.cuda.current_stream(self._dev)  # the worker thread's stream (this is called on it)

    def buffer(self, n: int) -> Any:
        import torch

        return torch.empty(n, dtype=torch.uint8, device=self._dev)

    def new_stream(self) -> Any:
        import torch

        return torch.cuda.Stream(device=self._dev)

    @contextmanager
    def on(self, stream: Any) -> Iterator[None]:
        import torch

        with torch.cuda.device(self._dev), torch.cuda.stream(stream):
            yield

    def mark(self) -> Any:
        """On the worker's thread, when it hands a payload over: where the payload's bytes are written."""
        import torch

        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self._dev))
        return event

    def after(self, mark: Any) -> None:
        import torch

        torch.cuda.current_stream(self._dev).wait_event(mark)

    def finish(self, stream: Any) -> None:
        stream.synchronize()

    def hand_over(self, bufs: list[Any]) -> None:
        for buf in bufs:
            buf.record_stream(self.compute)


def side_for(device: str) -> HostSide:
    """The device half for buffers on `device`: "cpu" or "cuda:N"."""
    return CudaSide(device) if device.startswith("cuda") else HostSide()
