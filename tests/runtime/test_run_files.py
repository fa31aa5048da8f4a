"""`wgc run PLAN --request JSON -o DIR`: outputs as files a person opens (wgc/cli/run_files.py).

Tiny Orpheus (real components, random weights) gives a WAV that the `wave` module opens at the rate
of its sample-rate hook; fake BAGEL a PNG that Pillow opens at the requested size; the HTTP toy
(tests/http/toys.py: a tokenizer hook, a tone, a gradient, an action chunk) the text, the audio at
its `const sample_rate`, the image and the .npy files of several requests, each in DIR/n/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from wgc.runtime.api import OutputEvent
from wgc.runtime.http.serving.outputs import OutputFormats
from wgc.runtime.http.text.tokenizer import ByteTokenizer

from tests.http.server import TOY, compile_plan
from wgc.cli.run_files import RequestFiles

ROOT = Path(__file__).resolve().parents[2]


def wgc_run(plan: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-c", "from wgc.cli.main import main; main()", "run", str(plan), *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_orpheus_speech_becomes_one_wav_at_the_hook_rate(tmp_path: Path) -> None:
    plan = compile_plan(tmp_path, ROOT / "models" / "orpheus.walk")
    out = tmp_path / "out"
    request = json.dumps({"inputs": {"prompt": "Hello from wgc."}, "params": {"max_tokens": 84}})
    done = wgc_run(plan, "--request", request, "-o", f"{out}/")
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()  # one line per file, no events
    assert line.startswith(f"{out / 'audio.wav'}  audio: 0.77 s, 16-bit mono at 6000 Hz (")
    with wave.open(str(out / "audio.wav")) as w:
        # the tiny SNAC's rate (its module's sample_rate hook); 9 windows of 512 samples (docs/http.md)
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()) == (6000, 1, 2, 9 * 512)


def test_a_fake_bagel_image_is_a_png_of_the_requested_size(tmp_path: Path) -> None:
    plan = compile_plan(tmp_path, ROOT / "models" / "bagel.walk")
    request = json.dumps({"params": {"width": 64, "height": 48, "steps": 2},
                          "parts": [{"kind": "text", "payload": "a red fox"}], "outputs": ["image"]})
    done = wgc_run(plan, "--fake", "--request", request, "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert f"{tmp_path / 'out' / 'image.png'}  image: 64x48 grey (" in done.stdout
    with Image.open(tmp_path / "out" / "image.png") as img:
        img.load()
        assert img.format == "PNG" and img.size == (64, 48)


def test_several_requests_write_text_audio_image_and_npy_each_in_its_directory(tmp_path: Path) -> None:
    plan = compile_plan(tmp_path, TOY)
    out = tmp_path / "out"
    done = wgc_run(plan, "-o", str(out), "--allow-module-prefix", "tests",  # the toy's components: tests.http.toys
                   "--request", json.dumps({"parts": [{"kind": "text", "payload": "héllo"}],
                                            "outputs": ["text", "audio"]}),
                   "--request", json.dumps({"task": "act", "outputs": ["action", "tensor"]}),
                   "--request", json.dumps({"parts": [{"kind": "text", "payload": "x"}], "outputs": ["image"],
                                            "params": {"width": 20, "height": 10}}))
    assert done.returncode == 0, done.stderr
    written = sorted(line.split("  ")[0] for line in done.stdout.splitlines())
    assert written == [str(out / p) for p in ("1/audio.wav", "1/text.txt", "2/action.npy", "2/tensor.npy",
                                              "3/image.png")]
    # text: the tokenizer hook's bytes, one token each, decoded whole (é spans two tokens), no end token
    assert (out / "1" / "text.txt").read_text(encoding="utf-8") == "Echo: héllo"
    assert f"{out / '1' / 'text.txt'}  text: 12 tokens, 11 characters (12 B)" in done.stdout
    with wave.open(str(out / "1" / "audio.wav")) as w:
        assert w.getframerate() == 8000 and w.getnframes() > 0  # the vocoder's `const sample_rate`
    assert np.load(out / "2" / "action.npy").tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert np.load(out / "2" / "tensor.npy").tolist() == [1, 2, 3]
    with Image.open(out / "3" / "image.png") as img:
        assert img.size == (20, 10) and img.mode == "RGB"


def test_dash_o_needs_a_request(tmp_path: Path) -> None:
    done = wgc_run(tmp_path / "x.plan", "-o", str(tmp_path / "out"), timeout=30)
    assert done.returncode == 2 and done.stderr == "wgc: -o DIR needs --request: it writes the requests' outputs\n"


def _event(modality: str, payload: object) -> OutputEvent:
    return OutputEvent(1, modality, payload, (), "", "w", 0, 0, 0.0, 0.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_end_tokens_are_left_out_and_tensors_numpy_lacks_are_saved_as_float32(tmp_path: Path,
                                                                              dtype: torch.dtype) -> None:
    files = RequestFiles(tmp_path, OutputFormats(ByteTokenizer(), frozenset({7}), 24000), (8, 8))
    for ev in (_event("text", [104, 0xC3]), _event("text", torch.tensor([0xA9, 7, 33])),
               _event("embedding", torch.ones(2, 3, dtype=dtype))):
        files.add(ev)
    lines = files.write()
    assert (tmp_path / "text.txt").read_text(encoding="utf-8") == "hé!"
    saved = np.load(tmp_path / "embedding.npy")
    assert saved.shape == (2, 3) and saved.dtype == (np.float32 if dtype == torch.bfloat16 else np.float16)
    assert lines[1].startswith(f"{tmp_path / 'embedding.npy'}  embedding: {saved.dtype} [2, 3] (")
