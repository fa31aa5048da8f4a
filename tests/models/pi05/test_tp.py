"""π0.5's language model and action expert at tensor-parallel degree 2 and 4 (threads as the group's
ranks, in one process): the component's prefix and flow (prefill, then Euler steps of `velocity`)
equal to tp 1 in float32, for π0.5 and π0, from random weights and from the miniature checkpoint;
each expert's query heads cut with the prefix's KV heads they attend to; a rank's shard read from the
checkpoint equal, bit for bit, to the whole checkpoint cut in place, with no split tensor read whole;
and a degree the layers cannot be split by refused in one line before any tensor is read."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from torch import Tensor
from wgc.models import weights_io
from wgc.models.layers.tensor_parallel import shard_llama
from wgc.models.layers.tp_cuts import attention_cuts
from wgc.models.layers.tp_shard import shard_in_place
from wgc.models.pi05 import PaliGemmaWithExpert
from wgc.models.pi05 import llm as llm_module
from wgc.models.pi05.config import Pi05Config
from wgc.models.pi05.weights import Checkpoint
from wgc.runtime.components.base import Call
from wgc.runtime.worker import tp_group

from tests.models.bagel.helpers import lively
from tests.models.pi05.checkpoint import STATE_DIM, mini_config, write
from tests.models.pi05.helpers import spec
from tests.models.test_tensor_parallel_load import Rank, Reads, assert_bitwise, counting_open
from tests.models.tp_ranks import on_ranks

TINY = Pi05Config.preset("tiny")  # 2 query heads over 1 KV head: tp 2 replicates it
MINI = mini_config()  # 8 query heads over 1 KV head: tp 2 and 4
KV2 = dataclasses.replace(MINI, prefix=dataclasses.replace(MINI.prefix, kv_heads=2, head_dim=32),
                          expert=dataclasses.replace(MINI.expert, kv_heads=2, head_dim=32))  # a KV head a rank at tp 2


def tp_spec(tp: int) -> Any:
    base = spec("llm")
    return base if tp == 1 else msgspec.structs.replace(base, ranks=list(range(tp)), tp=tp)


def flow(m: PaliGemmaWithExpert, steps: int = 3) -> tuple[Tensor, Tensor, tuple[int, int, str]]:
    """Two requests' prefixes in one batch, then `steps` Euler steps of both: the last velocity and x."""
    c, gen = m.config, torch.Generator().manual_seed(4)
    calls = []
    for request, cameras in ((1, 1), (2, 2)):
        features = torch.randn(cameras, c.vision.tokens, c.prefix.hidden, generator=gen)  # [C, T, W]
        state = torch.randn(m.norm_stats.state_dim, generator=gen).clamp(-0.9, 0.9)
        calls.append(Call(request, "", (features, f"pick up cube {request}", state)))
    m.prefill(calls)
    xs = [torch.randn(c.chunk, c.action_dim, generator=gen) for _ in calls]
    for k in range(steps):
        vs = m.velocity([Call(r, "", (x, 1.0 - k / steps)) for r, x in zip((1, 2), xs, strict=True)])
        xs = [x - v / steps for x, v in zip(xs, vs, strict=True)]
    return torch.stack(vs), torch.stack(xs), (m.kv.geometry.heads, m.kv.geometry.kv_heads, m.describe())


def check_against_tp_1(tp: int, build: Any, monkeypatch: pytest.MonkeyPatch, heads: int, kv: int) -> None:
    velocity, x, _ = flow(build(1, 0))
    assert velocity.abs().mean() > 0.1  # lively enough that a wrong shard shows
    for rank, (got_v, got_x, (local, kv_heads, said)) in enumerate(on_ranks(tp, "llm", build, flow, monkeypatch)):
        # float32 tolerance: the row-parallel sums reassociate (velocities of a few units, off by ~3e-5
        # at most); a wrong cut is off by units
        torch.testing.assert_close(got_v, velocity, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got_x, x, rtol=1e-4, atol=1e-4)
        assert (local, kv_heads) == (heads // tp, max(1, kv // tp))  # this rank's share of the KV cache
        assert f"tensor-parallel rank {rank} of {tp}; " in said


@pytest.mark.parametrize(("tp", "config", "pi05"), [(2, TINY, True), (2, TINY, False), (4, MINI, True),
                                                        (2, KV2, True)])
def test_the_component_at_tp_gives_tp_1s_velocities_and_chunk(tp: int, config: Pi05Config, pi05: bool,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_module, "init_random", lively)  # livelier weights than the preset's, on every rank
    config = config if pi05 else config.as_pi0()

    def build(tp: int, rank: int) -> PaliGemmaWithExpert:
        return PaliGemmaWithExpert(tp_spec(tp), rank, "cpu", config=config, seed=5)

    check_against_tp_1(tp, build, monkeypatch, config.prefix.heads, config.prefix.kv_heads)


def test_the_experts_query_heads_are_cut_with_the_prefixs_kv_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    """At tp 4 over MINI's one KV head every rank keeps it whole in both parts; the expert's query heads
    2r, 2r + 1 (of 8) sit on rank r, as the prefix's do."""
    whole = PaliGemmaWithExpert(tp_spec(1), 0, "cpu", config=MINI, seed=5)
    full = {part: dict(getattr(whole, part).named_parameters()) for part in ("prefix", "expert")}
    shards = on_ranks(4, "llm", lambda tp, r: PaliGemmaWithExpert(tp_spec(tp), r, "cpu", config=MINI, seed=5),
                      lambda m: {part: dict(getattr(m, part).named_parameters()) for part in ("prefix", "expert")},
                      monkeypatch)
    for r, params in enumerate(shards):
        cuts = attention_cuts("layers.1.self_attn.", 8, 1, 256, 4, r)
        for part in ("prefix", "expert"):
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                name = f"layers.1.self_attn.{proj}.weight"
                assert torch.equal(params[part][name], cuts[name].of(full[part][name])), (part, name)
            k = "layers.1.self_attn.k_proj.weight"
            assert torch.equal(params[part][k], full[part][k])  # the one KV head, whole on every rank
            q = "layers.1.self_attn.q_proj.weight"
            assert torch.equal(params[part][q], full[part][q][r * 512:(r + 1) * 512])  # query heads 2r, 2r + 1


# ---- from the miniature checkpoint -----------------------------------------------------------


@pytest.fixture(scope="module")
def miniature(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pi05_base-tp")
    write(directory)
    return directory


def whole_then_cut(directory: Path, group: Rank) -> tuple[Any, ...]:
    prefix, expert, heads = Checkpoint(directory).language(torch.device("cpu"), torch.float32)
    return shard_llama(prefix, group), shard_in_place(expert, group), heads


@pytest.mark.parametrize(("rank", "tp"), [(0, 2), (1, 2), (3, 4)])
def test_a_ranks_own_read_equals_the_whole_checkpoint_cut(miniature: Path, rank: int, tp: int,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    expected = whole_then_cut(miniature, Rank(rank, tp))
    reads = Reads()
    with monkeypatch.context() as patch:
        patch.setattr(weights_io, "safe_open", counting_open(reads))
        own = Checkpoint(miniature).language(torch.device("cpu"), torch.float32, Rank(rank, tp))
    for got, want in zip(own, expected, strict=True):
        assert_bitwise(got, want)
    assert own[0].config.heads == 8 // tp and own[0].lm_head.weight is own[0].embed_tokens.weight
    split = [n for n in reads.whole if "proj" in n and "gemma" in n or "lm_head" in n]
    assert not split, f"read whole: {split}"
    held = sum(p.numel() for part in own for p in part.parameters())
    assert sum(reads.sliced.values()) + sum(reads.whole.values()) == held  # exactly the shard's elements


def test_the_component_from_the_checkpoint_at_tp_2_gives_tp_1s_chunk(miniature: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def build(tp: int, rank: int) -> PaliGemmaWithExpert:
        return PaliGemmaWithExpert(tp_spec(tp), rank, "cpu", weights=miniature)

    velocity, x, _ = flow(build(1, 0))
    for got_v, got_x, _ in on_ranks(2, "llm", build, flow, monkeypatch):
        torch.testing.assert_close(got_v, velocity, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got_x, x, rtol=1e-4, atol=1e-4)
    assert STATE_DIM == build(1, 0).norm_stats.state_dim  # the checkpoint's statistics, on every rank alike


# ---- refusals --------------------------------------------------------------------------------


def test_a_degree_the_prefix_cannot_be_split_by_is_refused_naming_the_component(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tp_group, "group_for", lambda name: Rank(0, 4))
    with pytest.raises(ValueError, match=r"^pi05 llm prefix: tp = 4 does not divide the 2 attention heads$"):
        PaliGemmaWithExpert(tp_spec(4), 0, "cpu", preset="tiny")


def test_a_degree_refused_from_a_checkpoint_reads_no_tensor(miniature: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tp_group, "group_for", lambda name: Rank(0, 3))
    reads = Reads()
    monkeypatch.setattr(weights_io, "safe_open", counting_open(reads))
    with pytest.raises(ValueError, match=r"^pi05 llm prefix: tp = 3 does not divide the 8 attention heads$"):
        PaliGemmaWithExpert(tp_spec(3), 0, "cpu", weights=miniature)
    assert not reads.whole and not reads.sliced


def test_the_action_experts_mlp_is_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    config = dataclasses.replace(MINI, expert=dataclasses.replace(MINI.expert, intermediate=66))
    monkeypatch.setattr(tp_group, "group_for", lambda name: Rank(0, 4))
    with pytest.raises(ValueError, match=r"^pi05 llm action expert: tp = 4 does not divide the MLP's 66 "):
        PaliGemmaWithExpert(tp_spec(4), 0, "cpu", config=config)
