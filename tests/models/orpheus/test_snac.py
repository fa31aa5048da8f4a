"""The SNAC side: Orpheus's token → code mapping, the kept region, and streaming equals one-shot.

Streaming equals one-shot: random token sequences go through models/orpheus.walk on the runtime
(a scripted `llm` writes them, the real tiny SNAC decodes the sliding(28, 7) windows, `at_end drop`
ends the stream); the audio emitted, in order, equals the one-shot decode of all the codes at once
over the kept regions, sample for sample — the final window included, nothing dropped or repeated
at a window boundary. (The tiny SNAC's receptive field fits a window's context, which makes the
one-shot decode the exact reference; with SNAC 24 kHz chunked decoding is Orpheus's approximation.)
"""

from __future__ import annotations

import pytest
import torch
from wgc.models.orpheus import SnacDecoder, split_levels, token_codes
from wgc.models.orpheus.codec import SNAC_24KHZ, WINDOW, frame_samples
from wgc.models.orpheus.config import AUDIO_BASE, CODEBOOK, END_OF_SPEECH, FRAME
from wgc.runtime.components.base import Call
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process.local import LocalCluster

from tests.models.orpheus.helpers import ScriptedLLM, orpheus_plan, snac_spec
from wgc.semantics.stream_policy import make_policy


@pytest.fixture(scope="module")
def snac() -> SnacDecoder:
    return SnacDecoder.tiny(snac_spec(), 0, "cpu")


def audio_tokens(codes: list[int]) -> list[int]:
    """Orpheus tokens of codes in stream order: code c at stream position i is 128266 + 4096 (i mod 7) + c."""
    return [AUDIO_BASE + CODEBOOK * (i % FRAME) + c for i, c in enumerate(codes)]


def test_token_to_code_mapping_and_levels() -> None:
    codes = list(range(100, 114))  # two frames
    tokens = audio_tokens(codes)
    assert tokens[0] == 128266 + 100 and tokens[8] == 128266 + 4096 + 108
    assert token_codes(tokens).tolist() == codes
    l0, l1, l2 = split_levels(token_codes([tokens]))
    assert l0.tolist() == [[100, 107]]
    assert l1.tolist() == [[101, 104, 108, 111]]
    assert l2.tolist() == [[102, 103, 105, 106, 109, 110, 112, 113]]


def test_snac_24khz_keeps_samples_2048_to_4096_of_each_window() -> None:
    from snac import SNAC

    with torch.device("meta"):
        real = SNAC(**SNAC_24KHZ)
    assert frame_samples(real) == 2048 and real.sampling_rate == 24000  # 2048 samples = 85.3 ms
    assert sum(p.numel() for p in real.parameters()) == 19_842_914  # `weights = 19.8M` in orpheus.walk


def test_a_window_decodes_to_one_frame_and_an_invalid_window_to_silence(snac: SnacDecoder) -> None:
    gen = torch.Generator().manual_seed(0)
    good = audio_tokens(torch.randint(0, CODEBOOK, (WINDOW,), generator=gen).tolist())
    bad = good[:-1] + [END_OF_SPEECH]
    shifted = good[1:] + good[:1]  # frame positions off by one: no valid codes
    out = snac.decode([Call(1, "", (good,)), Call(2, "", (bad,)), Call(3, "", (torch.tensor(shifted),))])
    assert [tuple(a.shape) for a in out] == [(snac.frame,)] * 3 and all(a.dtype == torch.float32 for a in out)
    assert out[0].abs().sum() > 0 and not out[1].any() and not out[2].any()
    assert snac.keep == (snac.frame, 2 * snac.frame)
    assert snac.frame / snac.sample_rate == pytest.approx(2048 / 24000)  # a frame lasts 85.3 ms, as at 24 kHz
    torch.testing.assert_close(out[0], snac.decode_codes(token_codes([good]))[0, snac.frame:2 * snac.frame])
    assert snac.counters()["invalid_windows"] == 2
    with pytest.raises(ValueError, match="28 tokens"):
        snac.decode([Call(1, "", (good[:27],))])


# Code counts: whole frames, frames and a partial one (dropped at the end), one window exactly,
# too few for a window, and 6 codes past a frame so that end-of-speech completes the last window.
LENGTHS = [7 * 9, 7 * 6 + 3, 28, 20, 7 * 5 + 6, 7 * 12 + 1]


def test_streamed_audio_equals_one_shot_decode_over_the_kept_regions(snac: SnacDecoder) -> None:
    gen = torch.Generator().manual_seed(7)
    scripts = [audio_tokens(torch.randint(0, CODEBOOK, (n,), generator=gen).tolist()) for n in LENGTHS]
    plan = orpheus_plan()

    def factory(spec, rank):
        return snac if spec.name == "snac" else ScriptedLLM(spec, rank, "cpu", scripts)

    cluster = LocalCluster(plan, factory, fake_inputs=False)
    out = cluster.run([RequestSpec(inputs={"prompt": str(k)}, output_modalities=["audio"]) for k in range(len(scripts))])
    policy = make_policy("sliding", {"window": 28, "stride": 7})
    frame = snac.frame
    for k, (_, outputs) in enumerate(sorted(out.items())):
        tokens = [*scripts[k], END_OF_SPEECH]
        windows = policy.complete(len(tokens))  # at_end drop: only complete windows
        streamed = outputs.get("audio", [])
        assert len(streamed) == windows, (k, len(streamed), windows)
        assert all(a.shape == (frame,) and a.dtype == torch.float32 for a in streamed)
        got = torch.cat(streamed) if streamed else torch.empty(0)
        whole = len(scripts[k]) // FRAME
        reference = snac.decode_codes(token_codes([scripts[k][:whole * FRAME]]))[0] if whole else torch.empty(0)
        want = []
        for j in range(windows):  # window j's kept region is frame j + 1 of the utterance
            if 7 * j + WINDOW <= len(scripts[k]):
                want.append(reference[(j + 1) * frame:(j + 2) * frame])
            else:  # end-of-speech inside the window: silence, the same length
                want.append(torch.zeros(frame))
        want_audio = torch.cat(want) if want else torch.empty(0)
        assert got.shape == want_audio.shape
        torch.testing.assert_close(got, want_audio, atol=1e-5, rtol=1e-5, msg=lambda m, k=k: f"script {k}: {m}")
    assert sum(len(o.get("audio", [])) for o in out.values()) == sum(
        policy.complete(n + 1) for n in LENGTHS)


@pytest.mark.parametrize("fmt", ["pytorch_model.bin", "model.safetensors"])
def test_snac_loads_from_a_local_directory(snac: SnacDecoder, tmp_path, fmt: str) -> None:
    import json

    from safetensors.torch import save_file
    from wgc.models.orpheus.codec import SNAC_TINY, tiny_snac

    state = tiny_snac().state_dict()
    (tmp_path / "config.json").write_text(json.dumps(SNAC_TINY))
    if fmt == "pytorch_model.bin":
        torch.save(state, tmp_path / fmt)
    else:
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / fmt))
    loaded = SnacDecoder(snac_spec(), 0, "cpu", weights=tmp_path)
    codes = torch.randint(0, CODEBOOK, (2, WINDOW), generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(loaded.decode_codes(codes), snac.decode_codes(codes))
    assert loaded.source == str(tmp_path)


def test_snac_directory_problems_are_one_line(tmp_path) -> None:
    import json

    from wgc.models.orpheus import WeightsError
    from wgc.models.orpheus.codec import SNAC_TINY, tiny_snac

    with pytest.raises(WeightsError, match="no config.json"):
        SnacDecoder(snac_spec(), 0, "cpu", weights=tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(SNAC_TINY))
    with pytest.raises(WeightsError, match="no model.safetensors or pytorch_model.bin"):
        SnacDecoder(snac_spec(), 0, "cpu", weights=tmp_path)
    state = tiny_snac().state_dict()
    state.pop("decoder.model.0.bias")
    torch.save(state, tmp_path / "pytorch_model.bin")
    with pytest.raises(WeightsError, match="missing SNAC tensor decoder.model.0.bias"):
        SnacDecoder(snac_spec(), 0, "cpu", weights=tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"not a checkpoint")
    with pytest.raises(WeightsError, match="unreadable") as info:
        SnacDecoder(snac_spec(), 0, "cpu", weights=tmp_path)
    assert "\n" not in str(info.value)


def test_batch_buckets_are_few_and_end_at_max_batch() -> None:
    from wgc.models.orpheus.codec import batch_buckets

    assert batch_buckets(1) == [1]
    assert batch_buckets(16) == [1, 2, 4, 8, 16]
    assert batch_buckets(20) == [1, 2, 4, 8, 16, 20]
    assert batch_buckets(64) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]


def test_a_batch_is_padded_to_its_bucket_and_each_window_decodes_as_alone(snac: SnacDecoder,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Five windows run as a batch of 8 (copies of the first row, dropped after); each window's audio
    is what it gives decoded on its own."""
    gen = torch.Generator().manual_seed(3)
    windows = [audio_tokens(torch.randint(0, 4096, (WINDOW,), generator=gen).tolist()) for _ in range(5)]
    alone = [snac.decode([Call(1, "", (w,))])[0] for w in windows]
    seen: list[int] = []
    decode = snac.model.quantizer.from_codes  # both decoders (whole window, kept region) start here
    monkeypatch.setattr(snac.model.quantizer, "from_codes",
                        lambda levels: seen.append(levels[0].shape[0]) or decode(levels))
    together = snac.decode([Call(i, "", (w,)) for i, w in enumerate(windows)])
    assert seen == [8]
    assert len(together) == 5
    for a, b in zip(alone, together):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_warm_up_decodes_every_bucket_once_largest_first(snac: SnacDecoder, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    decode = snac.model.quantizer.from_codes  # both decoders (whole window, kept region) start here
    monkeypatch.setattr(snac.model.quantizer, "from_codes",
                        lambda levels: seen.append(levels[0].shape[0]) or decode(levels))
    lines: list[str] = []
    snac.warm_up(lines.append)
    assert seen == [16, 8, 4, 2, 1]
    assert lines == ["decoded batch sizes 1,2,4,8,16"]
