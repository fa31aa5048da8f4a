"""Real-weight loading on a generated miniature lerobot pi05_base-layout directory (checkpoint.py):
both components hold exactly the written tensors and run a chunk, the statistics unnormalise the
actions, WGC_PI05_DIR is read, and a broken directory is one clear error naming the file and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from wgc.models.layers.tokenizer import byte_tokenizer
from wgc.models.pi05 import PaliGemmaWithExpert, SiglipEncoder, policy_shape
from wgc.models.pi05.weights import checkpoint_name
from wgc.models.weights_io import WeightsError
from wgc.runtime.components.base import Call

from tests.models.pi05 import checkpoint
from tests.models.pi05.helpers import chunk, images, spec


def load(directory: Path) -> tuple[SiglipEncoder, PaliGemmaWithExpert]:
    return (SiglipEncoder(spec("vit"), 0, "cpu", weights=directory),
            PaliGemmaWithExpert(spec("llm"), 0, "cpu", weights=directory))


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor]]:
    directory = tmp_path_factory.mktemp("pi05_base")
    return directory, checkpoint.write(directory)


def test_the_components_hold_the_checkpoint_and_run_a_chunk(mini) -> None:
    directory, tensors = mini
    vit, llm = load(directory)
    for part, module in (("tower", vit.model), ("prefix", llm.prefix), ("expert", llm.expert), ("heads", llm.heads)):
        name = checkpoint_name(part)
        for n, p in module.named_parameters():
            assert torch.equal(p, tensors[name(n)]), n
    assert llm.config.pi05 and llm.config.prefix.heads == 8 and llm.config.vision.heads == 1
    assert (llm.norm_stats.state_dim, llm.norm_stats.action_dim, llm.norm_stats.source) == (8, 7, "checkpoint")
    assert llm.prompt_ids(Call(0, "", (None, "a", torch.zeros(8))))[0] == 2  # PaliGemma's <bos>
    llm.release(0)
    x = chunk(vit, llm, images(2, 56), "stack cups", torch.randn(8), torch.randn(50, 32))
    out = llm.to_actions([Call(1, "", (x,))])[0]
    low = load_file(str(directory / "policy_postprocessor_step_0_unnormalizer_processor.safetensors"))["action.q01"]
    torch.testing.assert_close(out, (x[:, :7] + 1.0) * 3.0 / 2.0 + low)


def test_the_older_transformers_names_load_the_same(tmp_path: Path) -> None:
    tensors = checkpoint.write(tmp_path / "older", outer=False, older=True)
    keys = load_file(str(tmp_path / "older" / "model.safetensors")).keys()
    assert "paligemma_with_expert.paligemma.language_model.model.layers.0.mlp.up_proj.weight" in keys
    vit, llm = load(tmp_path / "older")
    for part, module in (("tower", vit.model), ("prefix", llm.prefix)):
        name = checkpoint_name(part)
        for n, p in module.named_parameters():
            assert torch.equal(p, tensors[name(n)]), n


def test_a_tokenizer_json_without_a_post_processor_still_puts_bos_first(tmp_path: Path) -> None:
    directory = tmp_path / "plain"
    checkpoint.write(directory)
    checkpoint.paligemma_like_tokenizer(post_processor=False).save(str(directory / "tokenizer.json"))
    llm = PaliGemmaWithExpert(spec("llm"), 0, "cpu", weights=directory)
    ids = llm.prompt_ids(Call(0, "", (None, "a", torch.zeros(8))))
    assert ids[0] == 2 and ids[1:3] == [3 + ord("T"), 3 + ord("a")] and ids.count(2) == 1


def test_the_knob_selects_the_directory_and_the_route_hook_reads_its_shapes(mini, monkeypatch) -> None:
    directory, _ = mini
    monkeypatch.setenv("WGC_PI05_DIR", str(directory))
    assert PaliGemmaWithExpert(spec("llm"), 0, "cpu").source == str(directory)
    assert policy_shape(spec("llm")) == {"image_size": 56, "cameras": 3, "state_dim": 8, "chunk": 50, "action_dim": 7}
    monkeypatch.delenv("WGC_PI05_DIR")
    assert policy_shape(spec("llm"))["action_dim"] == 7 and policy_shape(spec("llm"))["state_dim"] == 8  # tiny


def broken(tmp_path: Path, edit) -> Path:
    directory = tmp_path / "broken"
    checkpoint.write(directory, outer=False)
    edit(directory)
    return directory


def _drop(name: str):
    def edit(d: Path) -> None:
        tensors = load_file(str(d / "model.safetensors"))
        del tensors[name]
        save_file(tensors, str(d / "model.safetensors"))
    return edit


def _add(name: str, shape: tuple[int, ...]):
    def edit(d: Path) -> None:
        tensors = load_file(str(d / "model.safetensors"))
        tensors[name] = torch.zeros(shape)
        save_file(tensors, str(d / "model.safetensors"))
    return edit


def _config(**changes):
    def edit(d: Path) -> None:
        raw = json.loads((d / "config.json").read_text())
        raw.update(changes)
        (d / "config.json").write_text(json.dumps(raw))
    return edit


EXPERT_DENSE = "paligemma_with_expert.gemma_expert.model.layers.1.post_attention_layernorm.dense.weight"


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: (d / "config.json").unlink(), r"config\.json: missing"),
    (lambda d: (d / "tokenizer.json").unlink(), r"tokenizer\.json: no tokenizer\.json"),
    (lambda d: byte_tokenizer({256: "<bos>"}, bos=256).save(str(d / "tokenizer.json")),
     r"tokenizer\.json: <bos> is 256, not 2: not PaliGemma's tokenizer"),
    (_drop(EXPERT_DENSE), r"model\.safetensors: missing tensor " + EXPERT_DENSE.replace(".", r"\.")),
    (_drop("time_mlp_in.weight"), r"model\.safetensors: missing tensor time_mlp_in\.weight"),
    (_add("paligemma_with_expert.extra.weight", (2,)), r"model\.safetensors: unexpected tensor paligemma_with_expert\.extra"),
    (_add("action_in_proj.weight", (16, 32)), r"tensor action_in_proj\.weight has shape \[16, 32\], expected \[32, 32\]"),
    (_config(paligemma_variant="gemma_7b"), r"config\.json: paligemma_variant 'gemma_7b' is not known"),
    (_config(type="act"), r"config\.json: type 'act' is neither pi05 nor pi0"),
    (lambda d: save_file({"observation.state.q01": torch.zeros(8)},
                         str(d / "policy_preprocessor_step_2_normalizer_processor.safetensors")),
     r"normalizer_processor\.safetensors: observation\.state\.q01 without observation\.state\.q99"),
])
def test_a_broken_directory_is_one_line_naming_the_file_and_key(tmp_path: Path, edit, message: str) -> None:
    directory = broken(tmp_path, edit)
    with pytest.raises(WeightsError, match=message) as err:
        llm = PaliGemmaWithExpert(spec("llm"), 0, "cpu", weights=directory)
        llm.norm_stats  # noqa: B018 - read: the statistics are checked when the component loads them
    assert "\n" not in str(err.value)
