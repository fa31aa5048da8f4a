"""Code2wav against transformers 5.24 (`Qwen3OmniMoeCode2Wav`) on the same tiny random weights, and its
streaming: the walk's left_context(left=25, chunk=25) at_end flush chunks, as the runtime's own
StreamBuffer forms them, each decoded to the samples of its new frames.

- every chunk's kept samples equal transformers' forward over that same chunk, at the kept indices;
- a streamed utterance of N frames has 1920·N − 555 samples and equals one transformers decode of
  all N frames (the tiny preset's left reach, 17.9 frames, is under the 25 of context, so the match
  is exact up to float rounding: tolerance 1e-5 absolute on samples in [−1, 1], measured ~5e-7);
- the last, short chunk's samples are there: the stream's tail is the full decode's tail.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from safetensors.torch import save_file
from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeCode2WavConfig
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeCode2Wav
from wgc.models.qwen3_omni.code2wav import Code2Wav, batch_buckets
from wgc.models.qwen3_omni.code2wav_config import Code2WavConfig, StreamWindows
from wgc.models.qwen3_omni.code2wav_net import Code2WavNet
from wgc.models.weights_io import WeightsError
from wgc.runtime.components.base import Call, CallError

from wgc.plan.model import ComponentSpec
from wgc.semantics.stream_buffer import StreamBuffer
from wgc.semantics.stream_policy import make_policy

ATOL = 1e-5
TINY = Code2WavConfig.preset("tiny")
# Frame counts: under one chunk, one chunk exactly, one past, two chunks, 25k + r for a few r.
LENGTHS = [1, 7, 24, 25, 26, 50, 63, 88, 101]


def spec(max_batch: int = 4) -> ComponentSpec:
    return ComponentSpec("code2wav", "wgc.models.qwen3_omni.Code2Wav", "stateless", [], {}, [], {"dtype": "f32"},
                         [0], 1, {"max_batch": max_batch})


@pytest.fixture(scope="module")
def code2wav() -> Code2Wav:
    return Code2Wav.tiny(spec(), 0, "cpu")


@pytest.fixture(scope="module")
def reference(code2wav: Code2Wav) -> Qwen3OmniMoeCode2Wav:
    """transformers' module with the component's tiny weights (every name the same, strict)."""
    ref = Qwen3OmniMoeCode2Wav(Qwen3OmniMoeCode2WavConfig(**TINY.hf_config())).eval()
    ref.load_state_dict(code2wav.net.state_dict(), strict=True)
    return ref


def ref_decode(ref: Qwen3OmniMoeCode2Wav, frames: torch.Tensor) -> torch.Tensor:
    """transformers' forward over frames [T, 16] → [1920·T − 555]."""
    with torch.no_grad():
        return ref(frames.T[None])[0, 0]  # codes [1, 16, T]


def utterance(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, TINY.codebook_size, (n, TINY.num_quantizers), generator=torch.Generator().manual_seed(seed))


def chunks_of(frames: torch.Tensor) -> list[tuple[list[torch.Tensor], bool]]:
    """The chunks the walk's `frames` stream delivers for these frames, in order: (items, final)."""
    buffer = StreamBuffer(make_policy("left_context", {"left": 25, "chunk": 25}), at_end="flush")
    out = []
    for frame in frames:
        buffer.push(frame)
        while (chunk := buffer.poll()) is not None:
            out.append((chunk.value, chunk.final))
    buffer.close()
    while (chunk := buffer.poll()) is not None:
        out.append((chunk.value, chunk.final))
    return out


def test_sample_arithmetic_of_both_presets() -> None:
    for c in (TINY, Code2WavConfig.preset("30b-a3b")):
        assert (c.hop, c.trim) == (1920, 555)  # 2·2·8·5·4·3; 0 → 8 → 45 → 184 → 555
        assert [c.samples(n) for n in (1, 25, 50)] == [1365, 47445, 95445]
    assert TINY.left_reach_frames() < 25 < Code2WavConfig.preset("30b-a3b").left_reach_frames()


def test_real_config_is_transformers_and_the_names_are_the_checkpoints() -> None:
    defaults = Qwen3OmniMoeCode2WavConfig().to_dict()
    assert Code2WavConfig.from_hf(defaults, name="30b-a3b") == Code2WavConfig.preset("30b-a3b")
    with torch.device("meta"):
        ours = Code2WavNet(Code2WavConfig.preset("30b-a3b"))
        theirs = Qwen3OmniMoeCode2Wav(Qwen3OmniMoeCode2WavConfig())
    assert {n: p.shape for n, p in ours.state_dict().items()} == {n: p.shape for n, p in theirs.state_dict().items()}
    assert 200e6 < sum(p.numel() for p in ours.parameters()) < 230e6  # `weights = 200M` in qwen3_omni.walk


def test_one_decode_equals_transformers(code2wav: Code2Wav, reference: Qwen3OmniMoeCode2Wav) -> None:
    for n in (1, 25, 50):
        frames = utterance(n, n)
        ours = code2wav.decode_frames(frames[None])[0]
        theirs = ref_decode(reference, frames)
        assert ours.shape == (1920 * n - 555,)
        torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)
        assert ours.std() > 0.05 and (ours.abs() < 1).float().mean() > 0.9  # not silence, not clipped


def test_each_chunk_keeps_the_samples_of_its_new_frames(code2wav: Code2Wav, reference: Qwen3OmniMoeCode2Wav) -> None:
    frames = utterance(88, 1)  # chunks of 25, 50, 50, 38 (the flush: 25 context + 13 new)
    chunks = chunks_of(frames)
    assert [(len(items), final) for items, final in chunks] == [(25, False), (50, False), (50, False), (38, True)]
    outs = code2wav.decode([Call(1, "", (items,)) for items, _ in chunks])  # one round: lengths batched
    for (items, _), out in zip(chunks, outs):
        window = torch.stack(items)  # [n, 16]
        full = ref_decode(reference, window)  # 1920·n − 555
        new = len(items) - (25 if len(items) > 25 else 0)
        assert out.shape == ((1920 * new - 555 if len(items) <= 25 else 1920 * new),)
        torch.testing.assert_close(out, full[len(full) - len(out):], atol=ATOL, rtol=0)  # its last samples


@pytest.mark.parametrize("n", LENGTHS)
def test_a_streamed_utterance_is_one_decode(code2wav: Code2Wav, reference: Qwen3OmniMoeCode2Wav, n: int) -> None:
    frames = utterance(n, 100 + n)
    chunks = chunks_of(frames)
    assert chunks[-1][1] == (n % 25 != 0) and len(chunks) == -(-n // 25)  # a flush exactly when n is not 25k
    streamed = [code2wav.decode([Call(7, "", (items,))])[0] for items, _ in chunks]
    audio = torch.cat(streamed)
    full = ref_decode(reference, frames)
    assert audio.shape == full.shape == (1920 * n - 555,)
    torch.testing.assert_close(audio, full, atol=ATOL, rtol=0)
    tail = streamed[-1]  # the last words: the final chunk's samples are the utterance's last ones
    assert len(tail) == (1920 * n - 555 if n <= 25 else 1920 * ((n - 1) % 25 + 1))
    torch.testing.assert_close(tail, full[-len(tail):], atol=ATOL, rtol=0)


def test_calls_of_mixed_lengths_batch_as_each_alone(code2wav: Code2Wav) -> None:
    chunks = [items for n, seed in ((30, 3), (63, 4), (7, 5)) for items, _ in chunks_of(utterance(n, seed))]
    together = code2wav.decode([Call(i, "", (items,)) for i, items in enumerate(chunks)])
    for items, out in zip(chunks, together):
        torch.testing.assert_close(out, code2wav.decode([Call(0, "", (torch.stack(items),))])[0], atol=ATOL, rtol=0)


def test_transformers_chunked_decode_drops_555_samples_per_boundary(reference: Qwen3OmniMoeCode2Wav,
                                                                   code2wav: Code2Wav) -> None:
    frames = utterance(100, 9)
    with torch.no_grad():
        theirs = reference.chunked_decode(frames.T[None], chunk_size=25, left_context_size=25)
    ours = torch.cat([code2wav.decode([Call(0, "", (items,))])[0] for items, _ in chunks_of(frames)])
    assert theirs.shape[-1] == 1920 * 100 - 4 * 555 == 189780  # models-wave2 §2.3
    assert ours.shape[-1] == 1920 * 100 - 555 == 191445


def test_a_longer_sliding_window_still_matches_each_window(reference: Qwen3OmniMoeCode2Wav) -> None:
    wide = Code2Wav(spec(), 0, "cpu", config=replace(TINY, name="wide", sliding_window=72))
    assert "approximating one decode" in wide.describe()
    ref = Qwen3OmniMoeCode2Wav(Qwen3OmniMoeCode2WavConfig(**wide.config.hf_config())).eval()
    ref.load_state_dict(wide.net.state_dict(), strict=True)
    items, _ = chunks_of(utterance(60, 2))[1]
    out = wide.decode([Call(0, "", (items,))])[0]
    torch.testing.assert_close(out, ref_decode(ref, torch.stack(items))[-1920 * 25:], atol=ATOL, rtol=0)


def test_bad_chunks_fail_their_own_request(code2wav: Code2Wav) -> None:
    good = utterance(25, 0)
    cases = {
        "1 to 50 frames": utterance(51, 0),
        "frames of 16 codes": good[:, :8],
        "code 64 in codebook 3": good.clone().index_put_((torch.tensor([2]), torch.tensor([3])), torch.tensor(64)),
        "not a list of codec frames": [[1, 2], [3]],
    }
    for needle, chunk in cases.items():
        with pytest.raises(CallError, match=needle) as caught:
            code2wav.decode([Call(5, "", (chunk,))])
        assert caught.value.request == 5
    with pytest.raises(ValueError, match="left is 0 or equals chunk"):
        StreamWindows(left=10, chunk=25)


def test_warm_up_builds_every_chunk_length_and_bucket() -> None:
    lines: list[str] = []
    Code2Wav.tiny(spec(max_batch=3), 0, "cpu").warm_up(lines.append)
    assert lines == ["decoded chunks of 25,50 frames at batch sizes 1,2,3"]
    assert batch_buckets(16) == [1, 2, 4, 8, 16] and batch_buckets(20) == [1, 2, 4, 8, 16, 20]


def test_weights_from_a_miniature_checkpoint(tmp_path, code2wav: Code2Wav) -> None:
    state = {"code2wav." + n: t.contiguous() for n, t in code2wav.net.state_dict().items()}
    names = sorted(state)
    save_file({n: state[n].to(torch.bfloat16) for n in names[:40]}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({**{n: state[n] for n in names[40:]}, "thinker.lm_head.weight": torch.zeros(2, 2)},
              str(tmp_path / "model-00002-of-00002.safetensors"))
    weight_map = {n: f"model-0000{1 if i < 40 else 2}-of-00002.safetensors" for i, n in enumerate(names)}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (tmp_path / "config.json").write_text(json.dumps({"code2wav_config": TINY.hf_config()}))
    loaded = Code2Wav(spec(), 0, "cpu", weights=tmp_path)
    frames = utterance(25, 11)
    expected = code2wav.net.state_dict()
    for n, t in loaded.net.state_dict().items():
        torch.testing.assert_close(t, expected[n].to(torch.bfloat16).float() if weight_map["code2wav." + n].startswith(
            "model-00001") else expected[n], atol=0, rtol=0)
    assert loaded.decode_frames(frames[None]).shape == (1, 1920 * 25 - 555)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    save_file({n: state[n] for n in names[40:-1]}, str(tmp_path / "model-00002-of-00002.safetensors"))
    with pytest.raises(WeightsError, match=f"missing tensor {names[-1]}"):
        Code2Wav(spec(), 0, "cpu", weights=tmp_path)
