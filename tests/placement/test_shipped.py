"""Every placement in placements/ loads cleanly against the model(s) it is written for.

Each is tried against the stand-in programs (always present, same names and sizes as the real
models) and against models/NAME.walk where it exists. cpu.toml is generic: every model.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.placement.helpers import MODELS, PLACEMENTS, STAND_INS, parse_file, real_model, rendered, stand_in
from wgc.lang import ast
from wgc.placement import estimate_memory, load_placement
from wgc.placement.schema import Placement

# placement → the models it serves. Generic files serve several.
SERVES: dict[str, tuple[str, ...]] = {
    "cpu.toml": STAND_INS,
    "cpu3.toml": ("bagel",),
    "cpu3-hosts.toml": ("bagel",),
    "1xh100.toml": ("bagel", "orpheus", "vjepa2_ac", "pi05"),
    "3xh100.toml": ("bagel",),
    "2xh200.toml": ("qwen3_omni",),
    "1xh200.toml": ("orpheus",),
    "bagel-1xh200.toml": ("bagel",),
    "orpheus-pd.toml": ("orpheus",),
    "orpheus-cpu2.toml": ("orpheus",),
    "orpheus-cpu2-hosts.toml": ("orpheus",),
    "orpheus-tp2-hosts.toml": ("orpheus",),
    "qwen3-omni-tp2-2hosts.toml": ("qwen3_omni",),
    "bagel-3hosts.toml": ("bagel",),
    "qwen3-omni-cpu2.toml": ("qwen3_omni",),
    "llama-cpu.toml": ("llama",),
    "llama-tp2-hosts.toml": ("llama",),
    "bagel-tp2-hosts.toml": ("bagel",),
    "qwen3-omni-tp2-hosts.toml": ("qwen3_omni",),
}
CASES = [(p, m) for p, models in SERVES.items() for m in models]


def _programs(model: str) -> list[tuple[str, ast.Program]]:
    out = [("stand-in", stand_in(model))] if model in STAND_INS else []  # llama has only its real program
    real = real_model(model)
    if real is not None:
        out.append(("models/", real))
    return out


def test_every_shipped_placement_is_listed() -> None:
    shipped = {p.name for p in PLACEMENTS.glob("*.toml")}
    assert shipped == set(SERVES)


def test_every_shipped_placement_has_a_header_comment() -> None:
    for name in SERVES:
        first = (PLACEMENTS / name).read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith(f"# {name}:"), name


def _file_cluster(path: Path) -> dict:
    """The [cluster] table the file itself writes (its base's is merged under it when loaded)."""
    return tomllib.loads(path.read_text(encoding="utf-8")).get("cluster", {})


def assert_placed(loaded: Placement, program: ast.Program, path: Path) -> None:
    """What a placement that loads must hold: every component of the program, in order, on ranks the
    cluster has, every rank used, the cluster the file writes, one memory row per rank, all fitting."""
    names = [d.name for d in program.decls if isinstance(d, ast.Component)]
    assert [c.name for c in loaded.components] == names
    ranks = set(range(loaded.cluster.ranks))
    for c in loaded.components:
        assert c.ranks and set(c.ranks) <= ranks and len(c.ranks) % c.tp == 0, c
    assert {r for c in loaded.components for r in c.ranks} == ranks  # no rank left idle
    assert (loaded.cluster.device == "cuda") == (loaded.cluster.gpu is not None)
    written = _file_cluster(path)
    for key in ("device", "ranks", "gpu"):
        if key in written:
            assert getattr(loaded.cluster, key) == written[key], key
    table = estimate_memory(loaded, program)
    assert [r.rank for r in table.ranks] == sorted(ranks) and all(r.fits for r in table.ranks)


@pytest.mark.parametrize(("placement", "model"), CASES, ids=[f"{p}-{m}" for p, m in CASES])
def test_loads_cleanly(placement: str, model: str) -> None:
    for origin, program in _programs(model):
        loaded, diags = load_placement(PLACEMENTS / placement, program)
        assert not diags, f"{origin}{model}:\n{rendered(diags)}"
        assert loaded is not None
        assert_placed(loaded, program, PLACEMENTS / placement)


MODEL_FILES = sorted(MODELS.glob("*.walk"))


def test_every_model_is_a_file() -> None:
    assert {p.stem for p in MODEL_FILES} >= {"bagel", "orpheus", "pi05", "qwen3_omni", "vjepa2_ac"}


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_cpu_serves_every_model_present(path: Path) -> None:
    program = parse_file(path)
    loaded, diags = load_placement(PLACEMENTS / "cpu.toml", program)
    assert loaded is not None and not diags, rendered(diags)
    assert loaded.cluster.device == "cpu" and loaded.cluster.ranks == 1
    assert_placed(loaded, program, PLACEMENTS / "cpu.toml")


def test_qwen3_omni_does_not_fit_one_h100() -> None:
    """1xh100.toml says so in its header: 61 GB of thinker weights plus two KV pools."""
    _, diags = load_placement(PLACEMENTS / "1xh100.toml", stand_in("qwen3_omni"))
    assert [d.code for d in diags] == ["P022"]


def test_3xh100_puts_one_guidance_branch_per_gpu() -> None:
    loaded, _ = load_placement(PLACEMENTS / "3xh100.toml", stand_in("bagel"))
    assert loaded is not None
    gen = loaded.walk("image_gen")
    assert gen is not None
    assert {p.target: p.ranks for p in gen.branches} == {"main": (0,), "cfg_text": (1,), "cfg_img": (2,)}
    llm = loaded.component("llm")
    assert llm is not None and llm.copies == ((0,), (1,), (2,)) and llm.routing == "mirror"
    assert loaded.sources[0].endswith("base/bagel-branches.toml")


def test_2xh200_splits_thinker_from_talker() -> None:
    loaded, _ = load_placement(PLACEMENTS / "2xh200.toml", stand_in("qwen3_omni"))
    assert loaded is not None
    assert {c.name for c in loaded.on_rank(0)} == {"audio_enc", "vision_enc", "thinker"}
    assert {c.name for c in loaded.on_rank(1)} == {"talker", "code2wav"}


def test_orpheus_pd_pins_prefill_and_decode() -> None:
    loaded, _ = load_placement(PLACEMENTS / "orpheus-pd.toml", stand_in("orpheus"))
    assert loaded is not None
    pins = {w.name: w.component_pin("llm") for w in loaded.walks}
    assert {name: pin.ranks for name, pin in pins.items() if pin} == {"prefill": (0,), "decode": (1,)}
    assert loaded.component("snac").ranks == (1,)  # type: ignore[union-attr]
    assert loaded.cluster.ranks == 2 and loaded.cluster.gpu == "H200"  # from the base, 1xh200.toml


def test_paths_work_relative_to_the_current_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(PLACEMENTS.parent)
    loaded, diags = load_placement(Path("placements/cpu3.toml"), stand_in("bagel"))
    assert loaded is not None, rendered(diags)
    assert loaded.sources == ("placements/base/bagel-branches.toml", "placements/cpu3.toml")
