"""A worker's round of Outputs leaves as one `Outputs` message, in emission order, and nothing it sends
later overtakes them (runtime/process/out_batch.py); the codec carries the batch."""

from __future__ import annotations

import torch
from wgc.runtime.process.out_batch import OutBatch
from wgc.runtime.protocol.codec import Codec
from wgc.runtime.protocol.messages import COORDINATOR, Drained, Message, Output, Outputs, StartWalk


def _out(request: int, seq: int) -> Output:
    return Output(request, "text", 100 * request + seq, "decode", 0, seq)


def test_a_round_of_outputs_is_one_message_in_emission_order() -> None:
    sent: list[tuple[int, Message]] = []
    batch = OutBatch(0, lambda d, m: sent.append((d, m)))
    emitted = [_out(r, s) for s in range(3) for r in (1, 2, 3)]
    for o in emitted:
        batch.send(COORDINATOR, o)
    assert sent == []  # held until the round ends
    batch.flush()
    assert sent == [(COORDINATOR, Outputs(emitted))]
    batch.flush()
    assert len(sent) == 1  # nothing held: nothing sent


def test_a_lone_output_goes_as_itself() -> None:
    sent: list[tuple[int, Message]] = []
    batch = OutBatch(0, lambda d, m: sent.append((d, m)))
    batch.send(COORDINATOR, _out(1, 0))
    batch.flush()
    assert sent == [(COORDINATOR, _out(1, 0))]


def test_any_other_message_sends_the_held_outputs_first() -> None:
    sent: list[tuple[int, Message]] = []
    batch = OutBatch(0, lambda d, m: sent.append((d, m)))
    walk = StartWalk(1, "k", "decode", {}, None, 0)
    batch.send(COORDINATOR, _out(1, 0))
    batch.send(COORDINATOR, _out(2, 0))
    batch.send(0, walk)  # to itself: stays in the process, the outputs stay held
    assert sent == [(0, walk)]
    batch.send(1, walk)  # to another rank: whatever it causes comes after the outputs
    batch.send(COORDINATOR, _out(1, 1))
    batch.send(COORDINATOR, Drained(1, 0, flow="f"))
    batch.flush()
    assert sent == [(0, walk), (COORDINATOR, Outputs([_out(1, 0), _out(2, 0)])), (1, walk),
                    (COORDINATOR, _out(1, 1)), (COORDINATOR, Drained(1, 0, flow="f"))]


def test_the_codec_carries_a_batch_with_tensors() -> None:
    codec = Codec()
    items = [_out(1, 0), Output(2, "audio", torch.arange(6, dtype=torch.float32).reshape(2, 3), "w", 0, 0)]
    back = codec.decode(codec.encode(Outputs(items)))
    assert isinstance(back, Outputs) and back.items[0] == items[0]
    assert torch.equal(back.items[1].value, items[1].value) and back.items[1].request == 2
