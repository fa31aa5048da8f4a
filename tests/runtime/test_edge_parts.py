"""The parts of the tensor edges between hosts that both backends share (runtime/process/edge_plan.py,
edge_frames.py, edge_device.py, the codec's `keep_on`), in one process, without sockets: which pairs
get an edge on which backend with buffers on which device, each frame's route, the header, the
arrival order, and where a receive buffer is allocated."""

from __future__ import annotations

from collections import deque

import pytest
import torch
import zmq
from wgc.runtime.process.edge_device import CudaSide, HostSide, side_for
from wgc.runtime.process.edge_frames import HEADER, InOrder, Pending, header, parse_header, split
from wgc.runtime.process.edge_plan import Link, Transport, edge_backend, links, transport_of, uses_edges
from wgc.runtime.process.store import needs_store
from wgc.runtime.protocol.codec import Codec
from wgc.runtime.protocol.messages import Data

from tests.runtime.loopback_plans import plan_of

# ---- which pairs, which backend, which device ------------------------------------------------------


def test_every_cross_host_pair_gets_one_group_per_direction_in_one_global_order() -> None:
    plan = plan_of([["cpu", "cpu"], ["cpu"], ["cpu"]])
    assert links(plan) == [Link(0, 2, "gloo"), Link(2, 0, "gloo"), Link(0, 3, "gloo"), Link(3, 0, "gloo"),
                           Link(1, 2, "gloo"), Link(2, 1, "gloo"), Link(1, 3, "gloo"), Link(3, 1, "gloo"),
                           Link(2, 3, "gloo"), Link(3, 2, "gloo")]  # 0-1 share a host: no edge
    assert transport_of(plan, 0) == Transport("gloo", "cpu", host_frames=True)


def test_nccl_edges_join_cuda_ranks_only_with_buffers_on_the_receivers_local_device() -> None:
    plan = plan_of([["cuda:0", "cuda:1"], ["cuda:0", "cpu"]], inter="nccl")
    assert links(plan) == [Link(0, 2, "nccl"), Link(2, 0, "nccl"), Link(1, 2, "nccl"), Link(2, 1, "nccl")]
    assert edge_backend(plan, 0, 3) is None  # a CPU rank: its tensors go as ZeroMQ frames
    assert transport_of(plan, 1) == Transport("nccl", "cuda:1", host_frames=False)  # its index on its host
    assert transport_of(plan, 2) == Transport("nccl", "cuda:0", host_frames=False)
    assert transport_of(plan, 1).keep_on == "cuda:1" and transport_of(plan, 0).keep_on == "cuda:0"
    assert transport_of(plan, 3) is None


@pytest.mark.parametrize(("hosts", "inter", "edges"), [
    ([["cpu"], ["cpu"]], "zmq", False),
    ([["cpu", "cpu"]], "gloo", False),
    ([["cuda:0"], ["cuda:0"]], "gloo", True),
    ([["cuda:0"], ["cuda:0"]], "nccl", True),
    ([["cuda:0"], ["cpu"]], "nccl", False),
])
def test_the_head_hosts_the_store_when_some_rank_has_an_edge(hosts: list[list[str]], inter: str,
                                                            edges: bool) -> None:
    plan = plan_of(hosts, inter)
    assert uses_edges(plan) is edges
    assert needs_store(plan) is edges  # no TP group in these plans: only an edge needs the store


# ---- each frame's route, the header -------------------------------------------------------------


class Zmq:
    """What a ZeroMQ frame offers a reader: `.bytes` and `.buffer`."""

    def __init__(self, data: bytes) -> None:
        self.bytes, self.buffer = data, memoryview(data)


def wire(frames: list[object]) -> list[Zmq]:
    return [Zmq(bytes(f) if not isinstance(f, torch.Tensor) else f.numpy().tobytes()) for f in frames]


def test_gloo_sends_every_frame_on_the_group_nccl_keeps_host_frames_on_zeromq() -> None:
    dev = torch.arange(6, dtype=torch.float32).reshape(-1).view(torch.uint8)  # a frame kept on its device
    host = memoryview(bytes(range(8)))
    frames = [b"head", host, dev, b""]
    route, inline, payload = split(frames, host_frames=True)
    assert (route, inline, [len(p) for p in payload]) == (b"8,24,0", [], [8, 24, 0])
    route, inline, payload = split(frames, host_frames=False)
    assert (route, inline, payload) == (b"z,24,z", [host, b""], [dev])


def test_a_header_announces_its_frames_in_the_codecs_order() -> None:
    frames = [b"head", memoryview(b"abc"), torch.zeros(5, dtype=torch.uint8), memoryview(b"")]
    route, inline, _ = split(frames, host_frames=False)
    got = parse_header(wire(header(7, frames[0], route, inline)))
    assert (got.source, got.head, got.sizes) == (7, b"head", [5])
    assert got.parts == [bytearray(b"abc"), None, bytearray(b"")] and got.waiting
    got.fill(["from the group"])
    assert got.frames() == [b"head", bytearray(b"abc"), "from the group", bytearray(b"")] and not got.waiting


def test_a_header_whose_zeromq_frames_do_not_match_its_route_is_refused() -> None:
    with pytest.raises(ValueError, match="lacks ZeroMQ frames"):
        parse_header(wire([HEADER, b"1", b"head", b"z,4,z", b"only one"]))
    with pytest.raises(ValueError, match="more ZeroMQ frames"):
        parse_header(wire([HEADER, b"1", b"head", b"4", b"stray"]))
    with pytest.raises(ValueError, match="2 frames for 1"):
        Pending(1, b"h", [None], [4]).fill([b"a", b"b"])


def test_messages_behind_a_payload_still_on_its_way_wait_for_it() -> None:
    first, second = Pending(1, b"h1", [None], [4]), Pending(1, b"h2", [None], [4])
    order = InOrder(deque(["a", first, "b", second, "c"]))
    assert order.ready() == ["a"]
    second.fill([b"x"])  # a later payload in first does not overtake the earlier one
    assert order.ready() == []
    first.fill([b"y"])
    assert order.ready() == [first, "b", second, "c"]
    failed = Pending(1, b"h3", [None], [4])
    order.items.extend([failed, "d"])
    failed.error = "ConnectionError: peer gone"  # an error releases what it held (the detector reports it)
    assert order.ready() == [failed, "d"]
    later = Pending(1, b"h4", [None], [4])
    order.items.extend([failed, later, "e"])
    later.fill([b"w"])
    assert order.released(lambda p: p.head) == [b"h4", "e"]  # decoded; the failed one is dropped


# ---- the codec's device frames ----------------------------------------------------------------------


def test_keep_on_leaves_that_devices_tensors_in_place_as_frames_and_decodes_them_there() -> None:
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    frames = Codec(keep_on="cpu").encode(Data(1, "i", "t", {"x": x, "s": torch.tensor(2.5)}))
    assert all(isinstance(f, torch.Tensor) and f.dtype == torch.uint8 for f in frames[1:])
    assert frames[1].data_ptr() == x.data_ptr()  # no copy: the frame holds the tensor's own memory
    got = Codec().decode([frames[0], *(f.clone() for f in frames[1:])]).value
    assert torch.equal(got["x"], x) and got["s"].shape == () and float(got["s"]) == 2.5
    assert got["x"].device == frames[1].device
    plain = Codec().encode(Data(1, "i", "t", {"x": x}))
    assert isinstance(plain[1], memoryview)  # without keep_on: host memory, as before


def test_a_zero_dimensional_tensor_crosses_the_codec() -> None:
    frames = Codec().encode(Data(1, "i", "t", torch.tensor(7, dtype=torch.int64)))
    assert int(Codec().decode([frames[0], bytes(frames[1])]).value) == 7


def test_empty_tensor_frames_decode_on_their_frames_device() -> None:
    frames = Codec(keep_on="cpu").encode(Data(1, "i", "t", torch.zeros(0, 3)))
    assert Codec().decode(frames).value.shape == (0, 3)


# ---- where buffers live ------------------------------------------------------------------------


def test_a_host_edge_allocates_host_buffers_with_no_stream() -> None:
    side = side_for("cpu")
    assert type(side) is HostSide and side.new_stream() is None and side.mark() is None
    buf = side.buffer(10)
    assert (buf.device.type, buf.dtype, buf.numel()) == ("cpu", torch.uint8, 10)


@pytest.mark.gpu
def test_a_cuda_edge_allocates_its_buffers_on_the_ranks_own_device() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    index = torch.cuda.device_count() - 1
    side = side_for(f"cuda:{index}")
    assert isinstance(side, CudaSide)
    stream = side.new_stream()
    with side.on(stream):
        buf = side.buffer(64)
        assert torch.cuda.current_stream(buf.device) == stream  # the edge's own stream, not compute's
    assert buf.device == torch.device(f"cuda:{index}") and stream != side.compute


def test_zmq_frames_read_as_the_header_parser_expects() -> None:
    ctx = zmq.Context()
    try:
        pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
        pull.bind("inproc://edge-header")
        push.connect("inproc://edge-header")
        push.send_multipart(header(3, b"head", b"z,4", [memoryview(b"abcd")]), copy=False)
        got = parse_header(pull.recv_multipart(copy=False))
        assert (got.source, got.parts, got.sizes) == (3, [bytearray(b"abcd"), None], [4])
    finally:
        ctx.destroy(linger=0)

