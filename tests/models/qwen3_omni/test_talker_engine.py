"""The talker component over the paged KV engine: decode steps through pages equal a dense recompute
of the whole sequence, a media part's M-RoPE grid positions (against transformers), the suppress
list and the repetition penalty on codebook 0, batching (each request's frames as alone), chunked
prefill, the turn close, the walk's codec EOS at the boundary, and bad inputs failing their call."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from wgc.models.qwen3_omni import talker_model as tm
from wgc.models.qwen3_omni.talker import Talker
from wgc.runtime.components.base import PARTIAL, CallError

from tests.models.qwen3_omni.talker_helpers import WALK_EOS, call, hf_talker, thinker_rows, tiny_talker

ARGS = ("Ethan", 0.0, 50, 1.05)  # speaker, temperature, top_k, repetition_penalty


def _record(talker: Talker) -> tuple[list[tuple[Tensor, Tensor]], list[Tensor]]:
    """Every decoder forward's (rows, positions) and every codec-head output."""
    inputs: list[tuple[Tensor, Tensor]] = []
    logits: list[Tensor] = []
    talker.model.model.register_forward_pre_hook(lambda _m, args: inputs.append((args[0].clone(), args[1].clone())))
    talker.model.codec_head.register_forward_hook(lambda _m, _i, out: logits.append(out.detach().clone()))
    return inputs, logits


def _speak(talker: Talker, requests: dict[int, tuple[Tensor, Tensor]], steps: int, temperature: float = 0.0,
           budget: int = 0) -> dict[int, list[Tensor]]:
    """Each request: its user rows, last_prefill on its first reply row, then `steps` decodes (reply
    rows, then the stream's empty items), all requests in one batch per entry."""
    ids = list(requests)
    pending = list(ids)
    while pending:  # chunked prefill: a call comes back PARTIAL until its last chunk
        done = talker.prefill([call(r, requests[r][0])._replace(budget=budget) for r in pending])
        pending = [r for r, d in zip(pending, done) if d is PARTIAL]
    args = (ARGS[0], temperature, *ARGS[2:])
    frames = dict(zip(ids, ([f] for f in talker.last_prefill([call(r, requests[r][1][:1], *args) for r in ids]))))
    for k in range(steps):
        texts = {r: requests[r][1][k + 1:k + 2] if k + 1 < len(requests[r][1]) else None for r in ids}
        out = talker.decode([call(r, frames[r][-1], texts[r], *args[1:]) for r in ids])
        for r, f in zip(ids, out):
            frames[r].append(f)
    return frames


def _request(seed: int, user: int, reply: int) -> tuple[Tensor, Tensor]:
    return thinker_rows(user, seed), thinker_rows(reply, seed + 1)


def test_paged_decode_equals_dense_recompute() -> None:
    """Two requests of different lengths through 4-token pages: every step's logits equal one dense
    causal forward over the request's whole sequence of rows."""
    talker = tiny_talker(7, page_size=4)
    inputs, logits = _record(talker)
    lengths = {1: 6, 2: 3}
    _speak(talker, {1: _request(1, 6, 3), 2: _request(2, 3, 5)}, steps=6)
    per_call = [list(lengths.values()), [11, 11]] + [[1, 1]] * 6  # rows each request wrote per forward
    rows: dict[int, list[tuple[Tensor, Tensor]]] = {1: [], 2: []}
    for (x, pos), sizes in zip(inputs, per_call):
        for r, xs, ps in zip(rows, x.split(sizes), pos.split(sizes, dim=1)):
            rows[r].append((xs, ps))
    steps = logits[0:]  # one codec-head call per forward after the prefill: [2, vocab] each
    for i, r in enumerate(rows):
        x = torch.cat([xs for xs, _ in rows[r]])[None]  # [1, T, hidden]
        pos = torch.cat([ps for _, ps in rows[r]], dim=1)[:, None]  # [3, 1, T]
        torch.testing.assert_close(pos[0, 0], torch.arange(x.shape[1], dtype=pos.dtype))  # text positions
        with torch.no_grad():
            dense = talker.model.codec_head(talker.model.model(x, pos))[0]  # [T, vocab]
        ends = torch.tensor([xs.shape[0] for xs, _ in rows[r]]).cumsum(0)[1:] - 1  # last row of each step
        torch.testing.assert_close(torch.stack([s[i] for s in steps]), dense[ends], atol=1e-10, rtol=1e-10)


def test_media_part_positions_match_transformers() -> None:
    """An image part's rows at the thinker's grid positions (relative), text after it one past the grid."""
    talker = tiny_talker(8)
    hf = hf_talker(talker)
    head, tail, reply = thinker_rows(3, 1), thinker_rows(2, 2), thinker_rows(1, 3)
    image = thinker_rows(6, 4)  # vision_start, a 2 x 2 grid of merged tokens, vision_end
    mm = torch.tensor([False, True, True, True, True, False])
    rel = torch.tensor([[0, 1, 1, 1, 1, 3], [0, 1, 1, 2, 2, 3], [0, 1, 2, 1, 2, 3]], dtype=torch.float32)
    _, logits = _record(talker)
    talker.prefill([call(1, head)])
    talker.prefill([call(1, {"rows": image, "multimodal": mm, "positions": rel})])
    talker.prefill([call(1, tail)])
    talker.last_prefill([call(1, reply, *ARGS)])
    seq = talker.kv.seq(1, "default")
    assert seq is not None and seq.position == 3 + 4 + 2 + 11  # the grid's 6 rows take 4 positions
    with torch.no_grad():
        user = talker.model.project(torch.cat([head, image, tail]).double(), torch.cat([torch.zeros(3, dtype=torch.bool),
                                                                                      mm, torch.zeros(2, dtype=torch.bool)]))
        prefix = talker.prefix_rows(talker.model.marker_rows(), reply[0].double(), talker.config.speaker_id("Ethan"))
        full = torch.cat([user, prefix])[None]  # [1, 22, hidden]
        text = torch.arange(3, dtype=torch.float32)
        pos = torch.cat([text.expand(3, -1), rel + 3, torch.arange(7, 20, dtype=torch.float32).expand(3, -1)], dim=1)
        want = hf(inputs_embeds=full, position_ids=pos[:, None].long()).logits[0, -1]
    torch.testing.assert_close(logits[-1][0], want, atol=1e-10, rtol=1e-10)


def _rig(talker: Talker, boosts: dict[int, float]) -> None:
    """Make the codec head favour ids: logits[id] = value."""
    def hook(_m: object, _i: object, out: Tensor) -> Tensor:
        out = out.clone()
        for i, v in boosts.items():
            out[..., i] = v
        return out

    talker.model.codec_head.register_forward_hook(hook)


def test_suppressed_ids_are_never_sampled_and_codec_eos_is_the_walks() -> None:
    talker = tiny_talker(9)
    c = talker.config
    _rig(talker, {c.vocab - 1: 1e4, c.speaker_id("ethan"): 1e4, c.codec_pad: 1e4, 17: 1e3})
    user, reply = _request(3, 4, 2)
    talker.prefill([call(1, user)])
    for temperature in (0.0, 5.0):  # greedy, and sampling at a high temperature
        frame = talker.last_prefill([call(1, reply[:1], "Ethan", temperature, 50, 1.05)])[0]
        assert int(frame[0]) == 17
        talker.release(1)
        talker.prefill([call(1, user)])
    _rig(talker, {c.codec_eos: 1e5})
    frame = talker.last_prefill([call(1, reply[:1], *ARGS)])[0]
    assert frame.tolist() == [WALK_EOS] + [0] * 15  # EOS ends the speech: no residual codes are predicted


def test_repetition_penalty_over_codebook_zero() -> None:
    """Code 7 just ahead of 8: the first frame takes 7, the next (7 seen, 100 / 1.05 < 99) takes 8."""
    for penalty, second in ((1.05, 8), (1.0, 7)):
        talker = tiny_talker(10)
        _rig(talker, {7: 100.0, 8: 99.0})
        user, reply = _request(4, 3, 3)
        frames = _speak(talker, {1: (user, reply)}, steps=0)[1]
        assert int(frames[0][0]) == 7
        frame = talker.decode([call(1, frames[0], reply[1:2], 0.0, 50, penalty)])[0]
        assert int(frame[0]) == second


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_batching_two_requests_gives_each_what_it_gets_alone(temperature: float) -> None:
    requests = {3: _request(5, 5, 4), 4: _request(6, 2, 2)}
    alone = {r: _speak(tiny_talker(11), {r: requests[r]}, 7, temperature)[r] for r in requests}
    together = _speak(tiny_talker(11), requests, 7, temperature)
    for r in requests:
        assert [f.tolist() for f in together[r]] == [f.tolist() for f in alone[r]]
    assert [f.tolist() for f in alone[3]] != [f.tolist() for f in alone[4]]


def test_chunked_prefill_gives_the_same_frames() -> None:
    requests = {1: _request(7, 9, 3)}
    whole = _speak(tiny_talker(12), requests, 4)[1]
    chunked = _speak(tiny_talker(12), requests, 4, budget=4)[1]
    assert [f.tolist() for f in chunked] == [f.tolist() for f in whole]


def test_a_closed_turn_gets_no_close_rows() -> None:
    """A part that ends its user turn itself (a client-templated prompt): the prefix alone follows it."""
    talker = tiny_talker(13)
    user = thinker_rows(4, 8)
    talker.prefill([call(1, {"rows": user, "open_user": False})])
    assert talker.input_tokens("last_prefill", call(1)) == 9
    talker.last_prefill([call(1, thinker_rows(1, 9), *ARGS)])
    seq = talker.kv.seq(1, "default")
    assert seq is not None and seq.position == 4 + 9
    talker.release(1)
    assert talker.kv.seq(1, "default") is None and talker.kv.pages.free_pages == talker.kv.pages.num_pages


def test_bad_inputs_fail_their_call() -> None:
    talker = tiny_talker(14)
    with pytest.raises(CallError, match=r"tensor \[N, 64\]"):
        talker.prefill([call(1, torch.zeros(3, 5))])
    with pytest.raises(CallError, match="multimodal"):
        talker.prefill([call(1, {"rows": torch.zeros(3, 64), "multimodal": torch.zeros(2, dtype=torch.bool)})])
    with pytest.raises(CallError, match="unknown speaker 'Nobody'"):
        talker.last_prefill([call(1, thinker_rows(1, 1), "Nobody", 0.0, 50, 1.05)])
    with pytest.raises(CallError, match=r"\[1, 64\]"):
        talker.last_prefill([call(1, thinker_rows(2, 1), *ARGS)])
    with pytest.raises(CallError, match="before last_prefill"):
        talker.decode([call(2, torch.zeros(16, dtype=torch.int64), None, 0.0, 50, 1.05)])
    frame = talker.last_prefill([call(1, thinker_rows(1, 1), *ARGS)])[0]
    with pytest.raises(CallError, match="frame of 16 codes"):
        talker.decode([call(1, frame[:3], None, 0.0, 50, 1.05)])
    with pytest.raises(CallError, match="outside the codec"):
        talker.decode([call(1, torch.full((16,), 999), None, 0.0, 50, 1.05)])
    assert talker.kv.seq(1, "default").position == 11  # type: ignore[union-attr]  # failed calls wrote nothing


def test_marker_rows_are_the_thinkers_embeddings() -> None:
    talker = tiny_talker(15)
    table = torch.randn(512, 64, dtype=torch.float64)
    talker.model.load_thinker_rows(table)
    ids = talker.config.thinker
    assert torch.equal(talker.model.thinker_rows[tm.ROW_TTS_PAD], table[ids.tts_pad])
    assert torch.equal(talker.model.thinker_rows[tm.ROW_IM_START], table[ids.im_start])
    assert ids.tts_pad == 509 and ids.newline == 10  # the thinker's compact tiny ids
