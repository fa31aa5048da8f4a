"""Real BAGEL weights (models/bagel/weights.py): a miniature BAGEL-7B-MoT directory in the real layout
loads into every component, each tensor read once; every problem is one line naming the file, the
tensor and what is wrong; the real configs give the 7B presets."""

from __future__ import annotations

import logging
import os
import shutil
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from wgc.models.bagel import LanguageModel, VaeDecoder, VaeEncoder, VitEncoder
from wgc.models.bagel.config import IM_START, BagelLLMConfig
from wgc.models.bagel.vae import VAE_7B, build_vae
from wgc.models.bagel.vae_bfl import bfl_architecture, bfl_shapes
from wgc.models.bagel.vit import VitConfig
from wgc.models.bagel.weights import parse_llm_config, parse_vit_config
from wgc.models.layers import inverse_frequencies
from wgc.models.weights_io import Entry, WeightsError
from wgc.runtime.components.base import Call

from tests.models.bagel.checkpoint import HIDDEN, LLM_CONFIG, VIT_CONFIG, VOCAB, bfl_state, write_miniature
from tests.models.bagel.helpers import call, llm_spec
from tests.models.safe_open_proxy import SafeOpenProxy
from wgc.plan.model import ComponentSpec


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor], torch.nn.Module]:
    directory = tmp_path_factory.mktemp("BAGEL-7B-MoT")
    ema, vae = write_miniature(directory)
    return directory, ema, vae


@pytest.fixture
def broken(saved: tuple[Path, Any, Any], tmp_path: Path) -> Path:
    """The miniature as links to the saved files; `rewrite` replaces one by a changed copy."""
    return Path(shutil.copytree(saved[0], tmp_path / "copy", copy_function=os.symlink))


def rewrite(path: Path, change: Callable[[dict[str, torch.Tensor]], Any]) -> None:
    """Replace a linked safetensors file by a copy whose state dict `change` edited in place."""
    state = load_file(str(path))
    change(state)
    path.unlink()
    save_file(state, str(path), metadata={"format": "pt"})


def rewrite_bytes(path: Path, change: Callable[[bytes], bytes]) -> None:
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(change(data))


def stateless(name: str, cls: str) -> ComponentSpec:
    return ComponentSpec(name, f"wgc.models.bagel.{cls}", "stateless", [], {}, [], {"dtype": "bf16"}, [0], 1, {})


BUILD: dict[str, Callable[..., Any]] = {
    "llm": lambda device="cpu", **kw: LanguageModel(llm_spec(), 0, device, **kw),
    "vit": lambda device="cpu", **kw: VitEncoder(stateless("vit", "VitEncoder"), 0, device, **kw),
    "vae_enc": lambda device="cpu", **kw: VaeEncoder(stateless("vae_enc", "VaeEncoder"), 0, device, **kw),
    "vae_dec": lambda device="cpu", **kw: VaeDecoder(stateless("vae_dec", "VaeDecoder"), 0, device, **kw),
}


def image(h: int, w: int) -> torch.Tensor:
    return torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))


def assert_written(module: torch.nn.Module, ema: dict[str, torch.Tensor], name: Callable[[str], str]) -> None:
    for n, p in module.named_parameters():
        assert p.dtype == torch.float32 and torch.equal(p, ema[name(n)].float()), n


# ---- every component loads its part, and runs ----------------------------------------------------


def test_the_llm_holds_the_written_tensors_and_runs(saved: tuple[Path, Any, Any]) -> None:
    directory, ema, _ = saved
    m = BUILD["llm"](weights=directory)
    assert_written(m.language_model, ema, lambda n: "language_model." + n)
    assert_written(m.adapter, ema, lambda n: n)
    c = m.config
    assert (c.vocab, c.hidden, c.layers, c.kv_heads, c.latent_grid, c.vocab_kind) == (VOCAB, HIDDEN, 2, 1, 16, "qwen")
    assert torch.equal(m.language_model.model.rotary.inv_freq, inverse_frequencies(16, 1e6))  # computed, not loaded
    assert m.source == str(directory) and m.tokenizer.token_to_id("<|im_start|>") == IM_START
    m.prefill_text([call(1, "main", "a red fox")])
    token = m.decode([call(1, "main", IM_START, 0.0)])[0]
    assert 0 <= token < VOCAB
    z = m.init_latents([call(1, "main", 32, 32)])[0]  # [4, 64]
    v = m.velocity([call(1, "main", z, 1.0)])[0]
    assert v.shape == (4, 64) and torch.isfinite(v).all()


def test_the_vit_holds_the_written_tensors_without_the_extra_layer(saved: tuple[Path, Any, Any]) -> None:
    directory, ema, _ = saved
    vit = BUILD["vit"](weights=directory)
    assert_written(vit.model, ema, lambda n: "vit_model." + n if n.startswith("vision_model.") else n)
    assert vit.config.layers == VIT_CONFIG["num_hidden_layers"] - 1 == len(vit.model.vision_model.encoder.layers)
    out = vit.encode([Call(0, "", (image(60, 90),))])[0]
    assert out.shape[1] == HIDDEN and torch.isfinite(out).all()


def test_the_vae_halves_hold_the_bfl_tensors_and_the_encoder_its_adapter(saved: tuple[Path, Any, Any]) -> None:
    directory, ema, ref = saved
    enc, dec = BUILD["vae_enc"](weights=directory), BUILD["vae_dec"](weights=directory)
    assert enc.vae.decoder is None and dec.vae.encoder is None
    for half, module in (("encoder", enc.vae.encoder), ("decoder", dec.vae.decoder)):
        want = getattr(ref, half).state_dict()
        assert all(torch.equal(t, want[k]) for k, t in module.state_dict().items()) and want.keys()
    assert_written(enc.adapter, ema, lambda n: n)
    assert (enc.config.ch, enc.config.ch_mult, enc.config.llm_hidden, enc.config.latent_grid) == (32, (1,) * 4, 32, 16)
    tokens = enc.encode([Call(0, "", (image(128, 128),))])[0]
    assert tokens.shape == (64, HIDDEN) and torch.isfinite(tokens).all()
    pixels = dec.decode([Call(0, "", (torch.randn(4, 64), 32, 32))])[0]
    assert pixels.shape == (32, 32, 3) and pixels.dtype == torch.uint8


def test_the_knob_names_the_directory_and_its_absence_is_one_line(saved: tuple[Path, Any, Any],
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("WGC_BAGEL_DIR", str(saved[0]))
    with caplog.at_level(logging.INFO, logger="wgc.models.bagel"):
        assert BUILD["vit"]().source == str(saved[0])
        monkeypatch.delenv("WGC_BAGEL_DIR")
        vit = BUILD["vit"]()
    assert vit.config == VitConfig.preset("tiny")
    records = [r.getMessage() for r in caplog.records if r.name == "wgc.models.bagel"]
    assert len(records) == 2 and str(saved[0]) in records[0]
    assert "no weights given (WGC_BAGEL_DIR unset)" in records[1] and "tiny preset" in records[1]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_every_part_loads_onto_cuda_in_the_walks_dtype(saved: tuple[Path, Any, Any]) -> None:
    """On CUDA the parts are allocated there in bf16 (the spec's dtype) and filled by the copy; the
    rotary table stays float32; each component still runs."""
    directory, ema, ref = saved
    m = BUILD["llm"]("cuda", weights=directory)
    embed = m.language_model.model.embed_tokens.weight
    assert embed.is_cuda and embed.dtype == torch.bfloat16
    assert torch.equal(embed.cpu(), ema["language_model.model.embed_tokens.weight"])  # bf16 in, bf16 kept
    inv_freq = m.language_model.model.rotary.inv_freq
    assert inv_freq.is_cuda and inv_freq.dtype == torch.float32
    m.prefill_text([call(1, "main", "a red fox")])
    assert 0 <= m.decode([call(1, "main", IM_START, 0.0)])[0] < VOCAB
    vit = BUILD["vit"]("cuda", weights=directory)
    assert torch.isfinite(vit.encode([Call(0, "", (image(60, 90),))])[0].float()).all()
    enc, dec = BUILD["vae_enc"]("cuda", weights=directory), BUILD["vae_dec"]("cuda", weights=directory)
    conv = enc.vae.encoder.conv_in.weight
    assert conv.is_cuda and torch.equal(conv.cpu(), ref.encoder.conv_in.weight.to(torch.bfloat16))
    assert enc.encode([Call(0, "", (image(128, 128),))])[0].shape == (64, HIDDEN)
    assert dec.decode([Call(0, "", (torch.randn(4, 64), 32, 32))])[0].shape == (32, 32, 3)


# ---- the weights are read once, into the parameters --------------------------------------------


def test_each_tensor_is_read_once_and_never_two_at_a_time(saved: tuple[Path, Any, Any],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Structure: every tensor the loader reads comes from safe_open's get_tensor; when it asks for
    one, every tensor it read before is gone (copied into its parameter and dropped)."""
    import wgc.models.weights_io as io

    reads: Counter[str] = Counter()
    alive: list[weakref.ref[torch.Tensor]] = []

    class Tracked(SafeOpenProxy):
        def fetched(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
            assert all(ref() is None for ref in alive), f"{name}: an earlier tensor is still held"
            reads[name] += 1
            alive.append(weakref.ref(tensor))
            return tensor

    monkeypatch.setattr(io, "safe_open", Tracked)
    directory, ema, _ = saved
    m = BUILD["llm"](weights=directory)
    owned = {"language_model." + n for n, _ in m.language_model.named_parameters()} | dict(m.adapter.named_parameters()).keys()
    assert set(reads) == owned and max(reads.values()) == 1
    reads.clear()
    dec = BUILD["vae_dec"](weights=directory)
    assert len(reads) == len(list(dec.vae.parameters())) and all(n.startswith("decoder.") for n in reads)
    assert max(reads.values()) == 1


# ---- one line for each problem -------------------------------------------------------------------

BAD_TENSORS = {  # file, change, component, the message's tail
    "missing": ("ema.safetensors", lambda s: s.pop("language_model.model.layers.1.mlp_moe_gen.up_proj.weight"),
                "llm", "missing tensor language_model.model.layers.1.mlp_moe_gen.up_proj.weight"),
    "unexpected": ("ema.safetensors", lambda s: s.update({"vit_model.vision_model.head.weight": torch.zeros(2)}),
                   "vit", "unexpected tensor vit_model.vision_model.head.weight"),
    "stranger": ("ema.safetensors", lambda s: s.update({"lm_head.weight": torch.zeros(2)}),
                 "vae_enc", "unexpected tensor lm_head.weight"),
    "shape": ("ema.safetensors", lambda s: s.update({"connector.fc1.weight": torch.zeros(32, 15)}),
              "vit", "tensor connector.fc1.weight has shape [32, 15], expected [32, 16]"),
    "dtype": ("ema.safetensors", lambda s: s.update({"vae2llm.bias": torch.zeros(32, dtype=torch.int64)}),
              "vae_enc", "tensor vae2llm.bias has dtype I64, expected a floating-point one"),
    "vae missing": ("ae.safetensors", lambda s: s.pop("decoder.mid.block_1.conv1.weight"),
                    "vae_dec", "missing tensor decoder.mid.block_1.conv1.weight"),
    "vae shape": ("ae.safetensors", lambda s: s.update({"encoder.norm_out.bias": torch.zeros(31)}),
                  "vae_dec", "tensor encoder.norm_out.bias has shape [31], expected [32]"),
}


def one_line_error(kind: str, directory: Path) -> str:
    with pytest.raises(WeightsError) as info:
        BUILD[kind](weights=directory)
    message = str(info.value)
    assert "\n" not in message and str(directory) in message
    return message


@pytest.mark.parametrize("case", list(BAD_TENSORS))
def test_a_bad_tensor_is_named_with_its_file(broken: Path, case: str) -> None:
    file, change, kind, tail = BAD_TENSORS[case]
    rewrite(broken / file, change)
    message = one_line_error(kind, broken)
    assert message.startswith(f"{broken / file}: ") and tail in message, message


@pytest.mark.parametrize("file, kind", [("ema.safetensors", "llm"), ("ae.safetensors", "vae_dec")])
@pytest.mark.parametrize("cut", ["header", "data"])
def test_a_truncated_file_is_corrupt(broken: Path, file: str, kind: str, cut: str) -> None:
    rewrite_bytes(broken / file, lambda data: data[:20] if cut == "header" else data[: len(data) // 2])
    message = one_line_error(kind, broken)
    assert message.startswith(f"{broken / file}: corrupt safetensors file"), message


BAD_CONFIGS = {  # file, change, component, the message's tail
    "bad json": ("llm_config.json", lambda b: b[:-5], "llm", "llm_config.json: not readable JSON"),
    "no key": ("vit_config.json", lambda b: b.replace(b'"hidden_size"', b'"width"'), "vit",
               "vit_config.json: no `hidden_size`"),
    "bad value": ("vit_config.json", lambda b: b.replace(b'"patch_size": 14', b'"patch_size": 0'), "vit",
                  "vit_config.json: `patch_size` is 0, expected an integer of at least 1"),
    "small vocab": ("llm_config.json", lambda b: b.replace(b"151680", b"1000"), "vae_enc",
                    "vocab_size 1000 cannot hold BAGEL's special tokens"),
    "not qwen2": ("llm_config.json", lambda b: b.replace(b'"qwen2"', b'"llama"'), "llm",
                  "llm_config.json: `model_type` is 'llama'; BAGEL's is 'qwen2'"),
    "no tokenizer": ("tokenizer.json", None, "llm", "no tokenizer.json"),
    "no ema": ("ema.safetensors", None, "vit", "no ema.safetensors"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_a_bad_config_or_a_missing_file_is_one_line(broken: Path, case: str) -> None:
    file, change, kind, tail = BAD_CONFIGS[case]
    if change is None:
        (broken / file).unlink()
    else:
        rewrite_bytes(broken / file, change)
    assert tail in one_line_error(kind, broken)


def test_a_directory_that_is_not_one_is_one_line(tmp_path: Path) -> None:
    assert "not a directory" in one_line_error("vae_dec", tmp_path / "nowhere")


# ---- the real files' configs ---------------------------------------------------------------------


def test_the_real_configs_give_the_7b_presets() -> None:
    llm = {**LLM_CONFIG, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 32768}
    assert parse_llm_config(llm, Path("llm_config.json"), "7b", 64, 256) == BagelLLMConfig.preset("7b")
    vit = {**VIT_CONFIG, "hidden_size": 1152, "image_size": 980, "intermediate_size": 4304, "num_attention_heads": 16,
           "num_hidden_layers": 27, "patch_size": 14}
    assert parse_vit_config(vit, Path("vit_config.json"), "7b", 3584, VAE_7B.resize) == VitConfig.preset("7b")


def test_the_bfl_layout_is_the_inverse_of_diffusers_names() -> None:
    """vae_bfl's table of BFL names against the test's own renaming of diffusers' parameters, at the
    7B's size; the architecture read back from it is FLUX's."""
    with torch.device("meta"):
        vae = build_vae(VAE_7B)
    table = bfl_shapes(VAE_7B)
    assert table == {k: tuple(t.shape) for k, t in bfl_state(vae).items()}
    found = {k: Entry(Path("ae.safetensors"), s, "BF16") for k, s in table.items()}
    assert replace(VAE_7B, **bfl_architecture(found, "ae.safetensors")) == VAE_7B
