"""Real-weight loading on generated miniature checkpoints in the real layouts (checkpoint.py): the HF
directory's encoder and masked predictor and the converted AC predictor hold the written tensors and
compute what transformers and the source module compute; WGC_VJEPA2_DIR selects them; a broken
directory is one line naming the file and the tensor; `wgc convert vjepa2-ac` refuses a file holding
anything but tensors."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file
from wgc.models.vjepa2_ac import ActionConditionedPredictor, Encoder, MaskedPredictor
from wgc.models.vjepa2_ac.blocks import normalize_reps
from wgc.models.vjepa2_ac.convert import ConvertError, convert
from wgc.models.weights_io import WeightsError

from tests.models.vjepa2_ac.checkpoint import ac_net, write_directory, write_upstream_pt
from tests.models.vjepa2_ac.helpers import call, frame, randn, spec
from tests.models.vjepa2_ac.hf import hf_encode, hf_model
from wgc.cli.main import cli


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("vjepa2") / "vitg"
    write_directory(d, ac_net())
    return d


def components(d: Path) -> tuple[Encoder, MaskedPredictor, ActionConditionedPredictor]:
    return (Encoder(spec("encoder", "Encoder", "stateless"), 0, "cpu", weights=d),
            MaskedPredictor(spec("predictor", "MaskedPredictor", "stateless"), 0, "cpu", weights=d),
            ActionConditionedPredictor(spec(), 0, "cpu", weights=d))


def test_every_part_loads_and_computes_what_its_source_computes(directory: Path) -> None:
    assert sorted(p.name for p in directory.iterdir()) == ["ac_encoder.safetensors", "ac_predictor.json",
                                                           "ac_predictor.safetensors", "config.json", "model.safetensors"]
    enc, pred, ac = components(directory)
    x = torch.randn(1, 4, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(enc.net(x), hf_encode(x), atol=1e-5)  # the AC file's encoder, converted back
        want = hf_model()(x).predictor_output.last_hidden_state[0]
        assert torch.allclose(pred.net(hf_encode(x))[0], want, atol=1e-5)
    source = ac_net()
    assert all(torch.equal(p, source.state_dict()[n]) for n, p in ac.net.state_dict().items())
    assert json.loads((directory / "ac_predictor.json").read_text()) == {
        "embed": 96, "hidden": 64, "layers": 2, "heads": 2, "grid": 4, "max_frames": 32}
    z0, a, s = frame(ac, 1), randn(7, seed=2), randn(7, seed=3)
    (nxt,) = ac.step([call(1, z0, a, s)])
    with torch.no_grad():
        want = normalize_reps(source.forward_dense(z0[None, None], a[None, None], s[None, None])[0, 0])
    assert torch.allclose(nxt, want, atol=1e-5)


def test_the_knob_selects_the_directory(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WGC_VJEPA2_DIR", str(directory))
    ac = ActionConditionedPredictor(spec(), 0, "cpu")
    assert ac.source == str(directory) and ac.config.heads == 2
    monkeypatch.delenv("WGC_VJEPA2_DIR")
    assert ActionConditionedPredictor(spec(), 0, "cpu").source == "tiny preset, random weights"


def broken(directory: Path, tmp_path: Path) -> Path:
    d = tmp_path / "broken"
    d.mkdir()
    for p in directory.iterdir():
        (d / p.name).write_bytes(p.read_bytes())
    return d


def test_a_broken_directory_is_one_line_naming_the_file_and_the_tensor(directory: Path, tmp_path: Path) -> None:
    d = broken(directory, tmp_path)
    state = load_file(str(d / "ac_predictor.safetensors"))
    state["predictor_proj.weight"] = state["predictor_proj.weight"][:, :-1].contiguous()
    save_file(state, str(d / "ac_predictor.safetensors"))
    with pytest.raises(WeightsError, match=r"ac_predictor.safetensors: tensor predictor_proj.weight has shape \[96, 63\], "
                                           r"expected \[96, 64\]"):
        ActionConditionedPredictor(spec(), 0, "cpu", weights=d)
    del state["predictor_proj.weight"]
    save_file(state, str(d / "ac_predictor.safetensors"))
    with pytest.raises(WeightsError, match="missing tensor predictor_proj.weight"):
        ActionConditionedPredictor(spec(), 0, "cpu", weights=d)
    (d / "ac_predictor.json").unlink()
    with pytest.raises(WeightsError, match=r"no ac_predictor.json \(a V-JEPA 2-AC directory holds"):
        ActionConditionedPredictor(spec(), 0, "cpu", weights=d)
    (d / "ac_encoder.safetensors").unlink()
    (d / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(WeightsError, match="model.safetensors: corrupt safetensors file"):
        Encoder(spec("encoder", "Encoder", "stateless"), 0, "cpu", weights=d)
    with pytest.raises(WeightsError, match="not a directory"):
        Encoder(spec("encoder", "Encoder", "stateless"), 0, "cpu", weights=tmp_path / "absent")


class Payload:
    """Not a tensor: torch.load(weights_only=True) refuses to build it."""


def test_the_converter_refuses_anything_but_tensors(tmp_path: Path) -> None:
    pt = tmp_path / "object.pt"
    torch.save({"predictor": {"w": Payload()}}, pt)
    with pytest.raises(ConvertError, match=r"object.pt: not a tensors-only checkpoint \(torch.load\(weights_only=True\) refused it"):
        convert(pt, tmp_path / "out")
    pt.write_bytes(pickle.dumps({"predictor": {"w": Payload()}}))
    with pytest.raises(ConvertError, match="not a tensors-only checkpoint"):
        convert(pt, tmp_path / "out")
    strings = tmp_path / "strings.pt"
    torch.save({"predictor": {"predictor_embed": {"weight": torch.zeros(2, 2), "bias": "zeros"}}}, strings)
    with pytest.raises(ConvertError, match=r"^predictor.predictor_embed.bias is a str, not a tensor"):
        convert(strings, tmp_path / "out")
    listed = tmp_path / "list.pt"
    torch.save([torch.zeros(1)], listed)
    result = CliRunner().invoke(cli, ["convert", "vjepa2-ac", str(listed), str(tmp_path / "out")])
    assert result.exit_code == 1 and "holds a list, expected a dict with `predictor` and `encoder`" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()  # nothing written for a refused file


def test_the_command_converts_and_reports(tmp_path: Path) -> None:
    pt = tmp_path / "ac.pt"
    write_upstream_pt(pt, ac_net())
    result = CliRunner().invoke(cli, ["convert", "vjepa2-ac", str(pt), str(tmp_path / "out"), "--grid", "4", "--heads", "2"])
    assert result.exit_code == 0, result.output
    assert "left out (training state): epoch, loss, opt" in result.output
    assert "left out (unused with RoPE): encoder.pos_embed" in result.output
    assert json.loads((tmp_path / "out" / "ac_predictor.json").read_text())["heads"] == 2
