"""The frontend's pure parts: admission, capabilities, media codecs, addresses, error mapping."""

from __future__ import annotations

import asyncio
import io
import wave
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from wgc.runtime.api import HealthReport, RankHealth
from wgc.runtime.http.admission import capacity as sizing
from wgc.runtime.http.admission.slots import Admission, Capacity, Full, TooWide
from wgc.runtime.http.media.audio import to_pcm16, wav_file, wav_header
from wgc.runtime.http.media.decode import MediaLimits, decode_wav, parse_data_url
from wgc.runtime.http.media.png import encode_png, to_pixels
from wgc.runtime.http.serving.capabilities import Capabilities
from wgc.runtime.http.serving.errors import CODES, ApiError
from wgc.runtime.http.serving.server import Address
from wgc.runtime.http.serving.validation import validation_error

from tests.http.server import ROOT, TOY, compile_plan
from wgc.plan.file import load_plan


def test_admission_runs_queues_refuses_and_cleans_up_after_a_cancelled_waiter() -> None:
    async def body() -> None:
        adm = Admission(Capacity(max_running=2, max_queued=1))
        hold = asyncio.Event()

        async def user(weight: int = 1) -> None:
            async with adm.slot(weight):
                await hold.wait()

        a, b = asyncio.create_task(user()), asyncio.create_task(user())
        await asyncio.sleep(0)
        c = asyncio.create_task(user())
        await asyncio.sleep(0)
        assert (adm.running, adm.queued) == (2, 1)
        with pytest.raises(Full) as full:
            async with adm.slot():
                pass
        assert full.value.retry_after >= 1
        c.cancel()
        await asyncio.gather(c, return_exceptions=True)
        assert adm.queued == 0
        with pytest.raises(TimeoutError):
            async with adm.slot(wait=0.01):
                pass
        hold.set()
        await asyncio.gather(a, b)
        assert (adm.running, adm.queued) == (0, 0)

    asyncio.run(body())


def test_resized_admission_grants_the_waiters_that_fit_and_refuses_the_too_wide() -> None:
    async def body() -> None:
        adm = Admission(Capacity(max_running=4, max_queued=4))
        hold = asyncio.Event()

        async def user(weight: int) -> None:
            async with adm.slot(weight):
                await hold.wait()

        first = asyncio.create_task(user(4))
        await asyncio.sleep(0)
        wide, narrow = asyncio.create_task(user(3)), asyncio.create_task(user(1))
        await asyncio.sleep(0)
        assert (adm.running, adm.queued) == (4, 2)
        adm.resize(Capacity(max_running=2, max_queued=8))  # wide can never run now; narrow waits for first
        with pytest.raises(TooWide):
            await wide
        assert (adm.running, adm.queued) == (4, 1)
        adm.resize(Capacity(max_running=5, max_queued=8))  # narrow fits beside first
        await asyncio.sleep(0)
        assert (adm.running, adm.queued) == (5, 0)
        with pytest.raises(TooWide):
            async with adm.slot(6):
                pass
        hold.set()
        await asyncio.gather(first, narrow)
        assert (adm.running, adm.queued) == (0, 0)

    asyncio.run(body())


def _report(counters: dict[str, int]) -> HealthReport:
    return HealthReport(True, (RankHealth(0, 1, "up", "", counters),), 0)


def test_slots_from_the_smallest_pool_over_expected_tokens(tmp_path: Path) -> None:
    bagel = load_plan(compile_plan(tmp_path, ROOT / "models" / "bagel.walk"))[1]
    llm = next(c for c in bagel.components if c.engine == "kv")
    assert len(llm.labels) == 3 and llm.attrs["max_seq_len"] == 32768
    assert sizing.expected_tokens(llm, 2048) == 3 * 2048  # the context caps max_seq_len, per label
    assert sizing.expected_tokens(llm, 10**6) == 3 * 32768  # and max_seq_len caps the context
    found = sizing.from_kv_pools(bagel, _report({"llm.kv_pages": 1000}), 2048)
    assert found is not None and found.source == "kv_pool"
    assert found.capacity == Capacity(1000 * 16 // 6144, 4 * (1000 * 16 // 6144))
    tiny = sizing.from_kv_pools(bagel, _report({"llm.kv_pages": 3}), 2048)
    assert tiny is not None and tiny.capacity.max_running == 1  # at least one


def test_no_pool_reported_keeps_the_max_batch_rule(tmp_path: Path) -> None:
    toy = load_plan(compile_plan(tmp_path, TOY))[1]
    assert sizing.from_kv_pools(toy, _report({"instances": 0}), 2048) is None  # fake components report none
    assert sizing.from_kv_pools(toy, HealthReport(False, (RankHealth(0, 1, "unresponsive", "", {}),), 0), 2048) is None
    rule = sizing.from_max_batch(toy)
    assert (rule.capacity, rule.source) == (Capacity(8, 16), "max_batch")


@pytest.mark.parametrize(("model", "routes"), [
    ("bagel", {"chat", "completions", "images", "edits", "generate"}),
    ("llama", {"chat", "completions", "generate"}),
    ("orpheus", {"speech", "generate"}),
    ("qwen3_omni", {"chat", "completions", "speech", "generate"}),
    ("pi05", {"policy", "generate"}),
    ("vjepa2_ac", {"world_model", "generate"}),
])
def test_routes_follow_from_each_model_plan(tmp_path: Path, model: str, routes: set[str]) -> None:
    caps = Capabilities.of(load_plan(compile_plan(tmp_path, ROOT / "models" / f"{model}.walk"))[1])
    assert {r for r, ok in caps.routes().items() if ok} == routes


def test_emitters_trace_outputs_to_their_components(tmp_path: Path) -> None:
    caps = Capabilities.of(load_plan(compile_plan(tmp_path, TOY))[1])
    assert {m: [c.name for c in cs] for m, cs in caps.emitters.items()} == {
        "text": ["llm"], "audio": ["voc"], "image": ["painter"], "action": ["painter"], "tensor": ["painter"]}
    assert caps.slot.via_parts and caps.slot.takes("image") and not caps.slot.takes("audio")


@pytest.mark.parametrize(("channels", "mode"), [(1, "L"), (2, "LA"), (3, "RGB"), (4, "RGBA")])
def test_png_decodes_to_the_same_pixels(channels: int, mode: str) -> None:
    img = (np.arange(5 * 7 * channels, dtype=np.int64) * 37 % 256).astype(np.uint8).reshape(5, 7, channels)
    png = encode_png(img)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(png)) as decoded:
        assert (decoded.format, decoded.mode, decoded.size) == ("PNG", mode, (7, 5))
        assert np.array_equal(np.asarray(decoded).reshape(5, 7, channels), img)


def test_png_of_a_model_tensor_decodes_to_its_scaled_pixels() -> None:
    chw = np.linspace(0.0, 1.0, 3 * 2 * 5, dtype=np.float32).reshape(3, 2, 5)  # [C, H, W] in [0, 1]
    with Image.open(io.BytesIO(encode_png(to_pixels(chw, (0, 0))))) as decoded:
        got = np.asarray(decoded)
    assert np.array_equal(got, np.round(np.transpose(chw, (1, 2, 0)) * 255).astype(np.uint8))


def test_png_and_wav_are_valid_files() -> None:
    assert to_pixels(np.ones((3, 4, 5), dtype=np.float32), (0, 0)).shape == (4, 5, 3)  # [C, H, W], floats scaled
    assert to_pixels(5, (6, 2)).shape == (2, 6, 1)  # a fake's number: a grey image of the requested size
    pcm = to_pcm16(np.array([0.0, 1.0, -2.0]))
    assert np.frombuffer(pcm, "<i2").tolist() == [0, 32767, -32767]
    with wave.open(io.BytesIO(wav_file(pcm, 16000))) as w:
        assert (w.getnframes(), w.getframerate()) == (3, 16000)
    assert wav_header(8000)[4:8] == b"\xff\xff\xff\xff"


def test_wav_input_is_decoded_checked_and_resampled() -> None:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(np.full(200, 16384, dtype="<i2").tobytes())
    samples = decode_wav(buf.getvalue(), "audio", MediaLimits(), rate=16000)
    assert samples.shape == (200,) and abs(float(samples[0]) - 0.5) < 1e-6
    with pytest.raises(ApiError) as err:
        decode_wav(buf.getvalue(), "audio", MediaLimits(max_seconds=0.001))
    assert err.value.code == "media_too_large"
    with pytest.raises(ApiError) as err:
        parse_data_url("data:image/png,raw", "image", MediaLimits())
    assert err.value.code == "invalid_media"


def test_addresses_bind_loopback_unless_told() -> None:
    assert Address.parse(":8000") == Address("127.0.0.1", 8000)
    assert Address.parse("0.0.0.0:80") == Address("0.0.0.0", 80)
    assert Address.parse("[::1]:0") == Address("::1", 0) and Address("::1", 0).url(5) == "http://[::1]:5"
    for bad in ("8000", "host:", ":99999", "a:b"):
        with pytest.raises(ValueError):
            Address.parse(bad)


def test_every_error_code_has_one_status_and_validation_maps_to_them(tmp_path: Path) -> None:
    assert all(400 <= status < 600 for status, _, _ in CODES.values())
    plan = load_plan(compile_plan(tmp_path, TOY))[1]
    err = validation_error(plan, [{"type": "extra_forbidden", "loc": ("body", "params", "steps"), "msg": ""}])
    assert (err.code, err.status) == ("unsupported_parameter", 400) and "max_tokens" in err.message
    err = validation_error(plan, [{"type": "less_than_equal", "loc": ("body", "n"), "msg": "too big"}])
    assert (err.code, err.status, err.param) == ("validation_error", 422, "n")
