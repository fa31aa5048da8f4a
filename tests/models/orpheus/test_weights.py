"""The weights loader: a Hugging Face directory loads whole or sharded; each problem is one clear line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from wgc.models.layers import LlamaModel
from wgc.models.layers.llama_weights import expected_shapes
from wgc.models.orpheus import OrpheusConfig, WeightsError, load_llama, save_llama
from wgc.models.orpheus.llm import tiny_init

CONFIG = OrpheusConfig.preset("tiny")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = LlamaModel(CONFIG.llama)
    tiny_init(model, CONFIG, seed=5)
    return save_llama(model, CONFIG.hf_config(), tmp_path_factory.mktemp("single"))


@pytest.fixture
def broken(saved: Path, tmp_path: Path) -> Path:
    """A copy of the saved directory to break."""
    return Path(shutil.copytree(saved, tmp_path / "copy"))


def rewrite(directory: Path, change) -> None:
    path = directory / "model.safetensors"
    state = load_file(str(path))
    change(state)
    save_file(state, str(path), metadata={"format": "pt"})


def one_line_error(directory: Path) -> str:
    with pytest.raises(WeightsError) as info:
        load_llama(directory, CONFIG.llama)
    message = str(info.value)
    assert "\n" not in message and str(directory) in message
    return message


def test_single_file_and_shards_load_the_same_weights(saved: Path, tmp_path: Path) -> None:
    one = load_llama(saved, CONFIG.llama)
    sharded = save_llama(one, CONFIG.hf_config(), tmp_path / "sharded", shards=4)
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 4 and set(index["weight_map"]) == set(expected_shapes(CONFIG.llama))
    two = load_llama(sharded, CONFIG.llama)
    for (name, a), (_, b) in zip(one.named_parameters(), two.named_parameters()):
        assert torch.equal(a, b), name
    assert torch.equal(one.rotary.inv_freq, LlamaModel(CONFIG.llama).rotary.inv_freq)  # buffers rebuilt


def test_a_missing_tensor_is_named(broken: Path) -> None:
    rewrite(broken, lambda s: s.pop("model.layers.2.mlp.up_proj.weight"))
    assert "missing tensor model.layers.2.mlp.up_proj.weight" in one_line_error(broken)


def test_an_unexpected_tensor_is_named(broken: Path) -> None:
    rewrite(broken, lambda s: s.update({"model.layers.9.self_attn.q_proj.weight": torch.zeros(2, 2)}))
    assert "unexpected tensor model.layers.9.self_attn.q_proj.weight" in one_line_error(broken)


def test_a_wrong_shape_is_named_with_both_shapes(broken: Path) -> None:
    rewrite(broken, lambda s: s.update({"model.norm.weight": torch.ones(64)}))
    message = one_line_error(broken)
    assert "tensor model.norm.weight has shape [64], expected [128]" in message


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_corrupt_safetensors_file_is_one_line(broken: Path, damage: str) -> None:
    path = broken / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "garbage": b"\x00not safetensors" * 8, "empty": b""}[damage])
    assert "corrupt safetensors file" in one_line_error(broken)


def test_a_missing_shard_or_file_or_config_is_one_line(saved: Path, tmp_path: Path) -> None:
    sharded = save_llama(load_llama(saved, CONFIG.llama), CONFIG.hf_config(), tmp_path / "sharded", shards=2)
    (sharded / "model-00002-of-00002.safetensors").unlink()
    assert "shard model-00002-of-00002.safetensors is missing" in one_line_error(sharded)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    assert "no model.safetensors" in one_line_error(empty)
    from wgc.models.layers.llama_weights import read_config

    with pytest.raises(WeightsError, match="no config.json"):
        read_config(tmp_path / "nowhere")


def test_config_json_round_trips_and_rejects_what_it_cannot_run(saved: Path) -> None:
    raw = json.loads((saved / "config.json").read_text())
    assert OrpheusConfig.from_hf_config(raw, "tiny") == CONFIG
    real = OrpheusConfig.preset("3b")
    assert OrpheusConfig.from_hf_config(real.hf_config(), "3b") == real
    with pytest.raises(ValueError, match="audio tokens"):
        OrpheusConfig.from_hf_config({**real.hf_config(), "vocab_size": 128256})
    with pytest.raises(ValueError, match="no `hidden_size`"):
        OrpheusConfig.from_hf_config({k: v for k, v in raw.items() if k != "hidden_size"})
    with pytest.raises(ValueError, match="rope type `yarn`"):
        OrpheusConfig.from_hf_config({**raw, "rope_scaling": {"rope_type": "yarn", "factor": 2.0}})


def test_a_tied_checkpoint_loads_with_the_head_tied(tmp_path: Path) -> None:
    from dataclasses import replace

    tied = replace(CONFIG, llama=replace(CONFIG.llama, tie_embeddings=True))
    model = LlamaModel(tied.llama)
    saved = save_llama(model, tied.hf_config(), tmp_path / "tied")
    assert "lm_head.weight" not in expected_shapes(tied.llama)
    loaded = load_llama(saved, OrpheusConfig.from_hf_config(json.loads((saved / "config.json").read_text())).llama)
    assert loaded.lm_head.weight is loaded.embed_tokens.weight
    assert torch.equal(loaded.embed_tokens.weight, model.embed_tokens.weight)
