"""Real Qwen3-Omni weights (models/qwen3_omni/weights.py): a miniature Qwen3-Omni-30B-A3B-Instruct
directory in the real layout (checkpoint.py: shards with an index, per-expert MoE names, the real
config.json structure, tokenizer.json, preprocessor_config.json) loads into every component, which
holds the written tensors and runs; the configs and token ids are the checkpoint's; each tensor is
read once, after every header was checked; every problem is one line naming the file and the tensor."""

from __future__ import annotations

import json
import logging
import os
import shutil
import weakref
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from wgc.models.qwen3_omni import AudioEncoder, Code2Wav, Talker, Thinker, VisionEncoder
from wgc.models.qwen3_omni.audio import AudioTower
from wgc.models.qwen3_omni.code2wav_net import Code2WavNet
from wgc.models.qwen3_omni.talker_model import TalkerModel
from wgc.models.qwen3_omni.thinker_model import ThinkerLM
from wgc.models.weights_io import WeightsError
from wgc.runtime.components.base import Call

from tests.models.qwen3_omni.checkpoint import CODEC, HIDDEN, MARKERS, SPEAKERS, VOCAB, write_miniature
from tests.models.qwen3_omni.talker_helpers import talker_spec
from tests.models.qwen3_omni.test_audio import spec as audio_spec
from tests.models.qwen3_omni.test_code2wav import spec as code2wav_spec
from tests.models.qwen3_omni.test_vision import spec as vision_spec
from tests.models.qwen3_omni.thinker_reference import spec as thinker_spec
from tests.models.safe_open_proxy import SafeOpenProxy

KNOB = "WGC_QWEN3_OMNI_DIR"
INDEX = "model.safetensors.index.json"
BUILD: dict[str, Callable[..., Any]] = {
    "thinker": lambda device="cpu", **kw: Thinker(thinker_spec(), 0, device, **kw),
    "talker": lambda device="cpu", **kw: Talker(talker_spec(), 0, device, **kw),
    "audio": lambda device="cpu", **kw: AudioEncoder(audio_spec(), 0, device, **kw),
    "vision": lambda device="cpu", **kw: VisionEncoder(vision_spec(), 0, device, **kw),
    "code2wav": lambda device="cpu", **kw: Code2Wav(code2wav_spec(), 0, device, **kw),
}
PREFIX = {"thinker": "thinker.", "talker": "talker.", "audio": "thinker.audio_tower.", "vision": "thinker.visual.",
          "code2wav": "code2wav."}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor]]:
    directory = tmp_path_factory.mktemp("Qwen3-Omni-30B-A3B-Instruct")
    return directory, write_miniature(directory)


@pytest.fixture
def broken(saved: tuple[Path, Any], tmp_path: Path) -> Path:
    """The miniature as links to the saved files; the tests replace one by a changed copy."""
    return Path(shutil.copytree(saved[0], tmp_path / "copy", copy_function=os.symlink))


def shard_of(directory: Path, name: str) -> Path:
    return directory / json.loads((directory / INDEX).read_text())["weight_map"][name]


def rewrite(path: Path, change: Callable[[dict[str, torch.Tensor]], Any]) -> None:
    state = load_file(str(path))
    change(state)
    path.unlink()
    save_file(state, str(path), metadata={"format": "pt"})


def rewrite_bytes(path: Path, change: Callable[[bytes], bytes]) -> None:
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(change(data))


def module_of(kind: str, component: Any) -> torch.nn.Module:
    return component.net if kind == "code2wav" else component.model


def assert_holds(kind: str, component: Any, written: dict[str, torch.Tensor]) -> None:
    """Every parameter is the written tensor (bf16 in the file, float32 here); every buffer computed."""
    module = module_of(kind, component)
    for n, p in module.named_parameters():
        assert p.dtype == torch.float32 and torch.equal(p, written[PREFIX[kind] + n].float()), n
    fresh = {"thinker": ThinkerLM, "talker": TalkerModel, "audio": AudioTower, "vision": None, "code2wav": Code2WavNet}
    if fresh[kind] is not None:
        built = dict(fresh[kind](component.config).named_buffers())
        for n, b in module.named_buffers():
            assert n == "thinker_rows" or torch.equal(b, built[n].to(b.dtype)), n


# ---- every component loads its part, and runs ----------------------------------------------------


def test_the_thinker_holds_its_tensors_with_the_checkpoints_ids_and_runs(saved: tuple[Path, Any]) -> None:
    directory, written = saved
    m = BUILD["thinker"](weights=directory)
    assert_holds("thinker", m, written)
    c, t = m.config, m.config.tokens
    assert (c.vocab, c.hidden, c.layers, c.experts, c.top_k, c.accept_layer, c.mrope_section) == (
        VOCAB, HIDDEN, 2, 4, 2, 1, (4, 2, 2))
    assert (t.im_start, t.im_end, t.user, t.audio, t.image, t.tts_pad, t.newline) == (300, 301, 303, 307, 310, 312, 10)
    assert not c.compact_vocab and m.tokenizer.token_to_id("<|audio_pad|>") == MARKERS["<|audio_pad|>"]
    m.prefill_text([Call(1, "", ("a red fox",))])
    token = m.begin_reply([Call(1, "", (0.0, 1.0))])[0]
    assert 0 <= token < VOCAB and 0 <= m.decode([Call(1, "", (token, 0.0, 1.0))])[0] < VOCAB


def test_the_talker_holds_its_tensors_and_the_thinker_rows_and_runs(saved: tuple[Path, Any]) -> None:
    directory, written = saved
    m = BUILD["talker"](weights=directory)
    assert_holds("talker", m, written)
    c = m.config
    assert (c.codec_pad, c.codec_eos, c.codec_think_eos) == (CODEC["codec_pad_id"], 1032, 1035)
    assert dict(c.speakers) == SPEAKERS and (c.vocab, c.experts, c.top_k, c.predictor.layers) == (1088, 4, 2, 1)
    ids = c.thinker.rows()  # <|im_start|>, assistant, "\n", <|im_end|>, tts_pad/bos/eos: the checkpoint's ids
    assert ids == (300, 304, 10, 301, 312, 313, 314)
    embed = written["thinker.model.embed_tokens.weight"]
    assert torch.equal(m.model.thinker_rows, embed[list(ids)].float())
    m.prefill([Call(1, "", (torch.randn(3, HIDDEN),))])
    frame = m.last_prefill([Call(1, "", (torch.randn(1, HIDDEN), "Ethan", 0.0, 50, 1.05))])[0]
    assert frame.shape == (16,) and bool(((frame >= 0) & (frame < 1088)).all())


def test_the_encoders_hold_their_tensors_and_the_processor_settings(saved: tuple[Path, Any]) -> None:
    directory, written = saved
    audio, vision = BUILD["audio"](weights=directory), BUILD["vision"](weights=directory)
    assert_holds("audio", audio, written)
    assert_holds("vision", vision, written)
    assert (audio.config.d_model, audio.config.output_dim, audio.config.mel.bins, audio.config.mel.hop) == (16, 32, 128, 160)
    assert (vision.config.hidden, vision.config.deepstack, vision.config.image.max_pixels) == (16, (0, 1), 128 * 128)
    tokens = audio.encode([Call(0, "", (0.1 * torch.randn(16000, generator=torch.Generator().manual_seed(0)),))])[0]
    assert tokens.shape == (13, HIDDEN) and torch.isfinite(tokens).all()
    image = torch.randint(0, 256, (64, 64, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    out = vision.encode_image([Call(0, "", (image,))])[0]
    assert out["embeds"].shape == (4, HIDDEN) and out["deepstack"].shape == (2, 4, HIDDEN)


def test_code2wav_holds_its_tensors_and_decodes(saved: tuple[Path, Any]) -> None:
    directory, written = saved
    m = BUILD["code2wav"](weights=directory)
    assert_holds("code2wav", m, written)
    audio = m.decode_frames(torch.randint(0, 64, (1, 25, 16), generator=torch.Generator().manual_seed(2)))
    assert audio.shape == (1, 1920 * 25 - 555) and torch.isfinite(audio).all()


def test_the_knob_names_the_directory_and_without_it_each_says_so_once(saved: tuple[Path, Any],
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(KNOB, str(saved[0]))
    assert str(saved[0]) in BUILD["code2wav"]().source
    monkeypatch.delenv(KNOB)
    with caplog.at_level(logging.INFO, logger="wgc.models.qwen3_omni"):
        built = {kind: build() for kind, build in BUILD.items()}
    records = [r for r in caplog.records if r.name == "wgc.models.qwen3_omni"]
    assert [r.getMessage().split(":")[0] for r in records] == [
        f"qwen3_omni {name}" for name in ("thinker", "talker", "audio_enc", "vision_enc", "code2wav")]
    assert all(r.levelno == logging.WARNING and f"no weights given ({KNOB} unset)" in r.getMessage() for r in records)
    assert all(m.config.name == "tiny" for m in built.values())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_every_part_loads_onto_cuda_in_the_walks_dtype(saved: tuple[Path, Any]) -> None:
    """On CUDA each part is allocated there in the spec's dtype (bf16; code2wav float32) and filled by
    the copy, its computed buffers moved along."""
    directory, written = saved
    for kind, dtype in (("thinker", torch.bfloat16), ("talker", torch.bfloat16), ("audio", torch.bfloat16),
                        ("vision", torch.bfloat16), ("code2wav", torch.float32)):
        module = module_of(kind, BUILD[kind]("cuda", weights=directory))
        for name, p in module.named_parameters():
            assert p.is_cuda and p.dtype == dtype and torch.equal(p.cpu(), written[PREFIX[kind] + name].to(dtype)), name
        assert all(b.is_cuda for b in module.buffers())


# ---- the weights are read once, after the headers --------------------------------------------------


class Reads:
    """weights_io.safe_open, recording each get_tensor (and that no earlier tensor is alive then) and
    each row a slice hands out."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import wgc.models.weights_io as io

        self.tensors: Counter[str] = Counter()
        self.rows: Counter[str] = Counter()
        self.alive: list[weakref.ref[torch.Tensor]] = []
        reads = self

        class Sliced:
            def __init__(self, name: str, piece: Any) -> None:
                self.name, self.piece = name, piece

            def get_shape(self) -> Any:
                return self.piece.get_shape()

            def get_dtype(self) -> Any:
                return self.piece.get_dtype()

            def __getitem__(self, index: Any) -> torch.Tensor:
                out = self.piece[index]
                reads.rows[self.name] += out.shape[0]
                return out

        class Tracked(SafeOpenProxy):
            def sliced(self, name: str, piece: Any) -> Sliced:
                return Sliced(name, piece)

            def fetched(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
                assert all(ref() is None for ref in reads.alive), f"{name}: an earlier tensor is still held"
                reads.tensors[name] += 1
                reads.alive.append(weakref.ref(tensor))
                return tensor

        monkeypatch.setattr(io, "safe_open", Tracked)


def test_each_tensor_is_read_once_into_its_parameter(saved: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """All five components together read every tensor of the checkpoint exactly once, one alive at a
    time; the talker reads only its seven rows of the thinker's embedding table."""
    directory, written = saved
    reads = Reads(monkeypatch)
    for build in BUILD.values():
        build(weights=directory)
    assert set(reads.tensors) == set(written) and max(reads.tensors.values()) == 1
    assert dict(reads.rows) == {"thinker.model.embed_tokens.weight": 7}


def test_the_headers_are_checked_before_any_tensor_is_read(broken: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "thinker.model.norm.weight"  # the thinker's last tensor in the last of its shards
    rewrite(shard_of(broken, name), lambda s: s.update({name: torch.ones(31)}))
    reads = Reads(monkeypatch)
    with pytest.raises(WeightsError, match="has shape"):
        BUILD["thinker"](weights=broken)
    assert not reads.tensors and not reads.rows


# ---- one line for each problem -------------------------------------------------------------------

EXPERT = "thinker.model.layers.1.mlp.experts.3.down_proj.weight"


def drop_from_index(directory: Path, name: str) -> None:
    index = json.loads((directory / INDEX).read_text())
    del index["weight_map"][name]
    rewrite_bytes(directory / INDEX, lambda _: json.dumps(index).encode())


BAD_TENSORS = {  # the tensor whose shard changes, the change, the component, the message (with the shard's path)
    "missing from shard and index": (EXPERT, lambda s: s.pop(EXPERT), "thinker", "{dir}: missing tensor " + EXPERT),
    "missing from its shard": (EXPERT, lambda s: s.pop(EXPERT), "thinker",
                               "{shard}: missing tensor " + EXPERT + ", which " + INDEX + " places there"),
    "unexpected": ("talker.codec_head.weight", lambda s: s.update({"talker.model.layers.2.mlp.gate.weight": torch.zeros(4, 32)}),
                   "talker", "{shard}: unexpected tensor talker.model.layers.2.mlp.gate.weight"),
    "stranger": ("code2wav.code_embedding.weight", lambda s: s.update({"mtp.proj.weight": torch.zeros(2)}), "audio",
                 "{shard}: unexpected tensor mtp.proj.weight"),
    "shape": ("thinker.visual.pos_embed.weight", lambda s: s.update({"thinker.visual.pos_embed.weight": torch.zeros(15, 16)}),
              "vision", "{shard}: tensor thinker.visual.pos_embed.weight has shape [15, 16], expected [16, 16]"),
    "dtype": ("code2wav.code_embedding.weight",
              lambda s: s.update({"code2wav.code_embedding.weight": torch.zeros(1024, 32, dtype=torch.int64)}), "code2wav",
              "{shard}: tensor code2wav.code_embedding.weight has dtype I64, expected a floating-point one"),
    "thinker rows": ("thinker.model.embed_tokens.weight",
                     lambda s: s.update({"thinker.model.embed_tokens.weight": torch.zeros(VOCAB, 16)}), "talker",
                     "{shard}: tensor thinker.model.embed_tokens.weight has shape [512, 16], expected [512, 32]"),
}


def one_line_error(kind: str, directory: Path) -> str:
    with pytest.raises(WeightsError) as info:
        BUILD[kind](weights=directory)
    message = str(info.value)
    assert "\n" not in message and str(directory) in message
    return message


@pytest.mark.parametrize("case", list(BAD_TENSORS))
def test_a_bad_tensor_is_one_line_naming_its_file(broken: Path, case: str) -> None:
    name, change, kind, want = BAD_TENSORS[case]
    shard = shard_of(broken, name)
    rewrite(shard, change)
    if case == "missing from shard and index":
        drop_from_index(broken, name)
    message = one_line_error(kind, broken)
    assert message.startswith(want.format(dir=broken, shard=shard)), message


@pytest.mark.parametrize("cut", ["header", "data"])
def test_a_truncated_shard_is_corrupt(broken: Path, cut: str) -> None:
    shard = shard_of(broken, "talker.codec_head.weight")
    rewrite_bytes(shard, lambda data: data[:20] if cut == "header" else data[: len(data) // 2])
    assert one_line_error("talker", broken).startswith(f"{shard}: corrupt safetensors file")


def test_an_index_naming_an_absent_shard_is_one_line(broken: Path) -> None:
    shard = shard_of(broken, EXPERT)
    shard.unlink()
    assert one_line_error("vision", broken) == f"{broken / INDEX}: shard {shard.name} is missing from {broken}"


def edit_json(key_path: tuple[str, ...], value: Any) -> Callable[[bytes], bytes]:
    """A JSON file's change: set (or with value None, delete) the key at key_path."""
    def change(data: bytes) -> bytes:
        raw = json.loads(data)
        *outer, last = key_path
        node = raw
        for key in outer:
            node = node[key]
        if value is None:
            del node[last]
        else:
            node[last] = value
        return json.dumps(raw).encode()
    return change


BAD_FILES = {  # file, change (None: removed), component, the message's tail
    "config json": ("config.json", lambda b: b[:-9], "thinker", "config.json: not readable JSON"),
    "index json": (INDEX, lambda b: b[:-9], "code2wav", f"{INDEX}: not readable JSON"),
    "processor json": ("preprocessor_config.json", lambda b: b[:-9], "audio", "preprocessor_config.json: not readable JSON"),
    "tokenizer json": ("tokenizer.json", lambda b: b[:-9], "thinker", "tokenizer.json: not a readable tokenizer.json"),
    "no talker config": ("config.json", edit_json(("talker_config",), None), "talker",
                         "config.json: no `talker_config.text_config` object"),
    "no key": ("config.json", edit_json(("thinker_config", "text_config", "moe_intermediate_size"), None), "thinker",
               "config.json: `thinker_config` has no `moe_intermediate_size`"),
    "id out of range": ("config.json", edit_json(("im_start_token_id",), 151644), "audio",
                        "config.json: special token id 151644 is outside thinker_config.text_config.vocab_size 512"),
    "codec id": ("config.json", edit_json(("talker_config", "codec_eos_token_id"), 4198), "talker",
                 "config.json: talker_config `codec_eos_token_id` 4198 is outside the codec vocab_size 1088"),
    "marker id": ("config.json", edit_json(("thinker_config", "audio_token_id"), 320), "thinker",
                  "tokenizer.json: <|audio_pad|> is token 307, config.json gives 320"),
    "bad code2wav value": ("config.json", edit_json(("code2wav_config", "decoder_dim"), 0), "code2wav",
                           "config.json: code2wav_config: code2wav_config `decoder_dim` is 0, expected a positive integer"),
    "sampling rate": ("preprocessor_config.json", edit_json(("sampling_rate",), 8000), "audio",
                      "preprocessor_config.json: `sampling_rate` is 8000; the audio encoder's log-mel is at 16000 Hz"),
    "patch size": ("preprocessor_config.json", edit_json(("patch_size",), 14), "vision",
                   "preprocessor_config.json: `patch_size` is 14, vision_config's is 16"),
    "no tokenizer": ("tokenizer.json", None, "talker", "no tokenizer.json"),
    "no processor": ("preprocessor_config.json", None, "vision", "no preprocessor_config.json"),
    "no config": ("config.json", None, "code2wav", "no config.json"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_config_or_a_missing_file_is_one_line(broken: Path, case: str) -> None:
    file, change, kind, tail = BAD_FILES[case]
    if change is None:
        (broken / file).unlink()
    else:
        rewrite_bytes(broken / file, change)
    message = one_line_error(kind, broken)
    assert tail in message, message


def test_a_directory_that_is_not_one_is_one_line(tmp_path: Path) -> None:
    assert "not a directory" in one_line_error("thinker", tmp_path / "nowhere")
