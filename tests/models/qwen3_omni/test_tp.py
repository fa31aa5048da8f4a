"""Qwen3-Omni's thinker and talker at tensor-parallel degree 2 and 4 (threads as the group's ranks, in
one process): the MoE decoders equal to tp 1 in float32 (each MoE bit for bit: experts partitioned
whole, tests/models/test_tp_layers.py), the components over their paged KV engines giving tp 1's
rows, tokens and frames, and a rank's shard read from the miniature checkpoint equal, bit for bit,
to the whole checkpoint cut in place, with no split tensor read whole and no other rank's expert read."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from wgc.models import weights_io
from wgc.models.layers.tp_modules import ExpertParallelMoE
from wgc.models.layers.tp_shard import shard_in_place
from wgc.models.qwen3_omni import talker_model as tm
from wgc.models.qwen3_omni import thinker as thinker_module
from wgc.models.qwen3_omni.config import ThinkerConfig
from wgc.models.qwen3_omni.talker import Talker, replicated
from wgc.models.qwen3_omni.talker_config import TalkerConfig
from wgc.models.qwen3_omni.thinker import Thinker
from wgc.models.qwen3_omni.thinker_model import Deepstack, ThinkerLM
from wgc.models.qwen3_omni.weights import Checkpoint
from wgc.runtime.components.base import PARTIAL, Call
from wgc.runtime.worker import tp_group

from tests.models.qwen3_omni.checkpoint import write_miniature
from tests.models.qwen3_omni.talker_helpers import call, talker_spec, thinker_rows
from tests.models.qwen3_omni.talker_helpers import lively as lively_talker
from tests.models.qwen3_omni.thinker_reference import lively, spec
from tests.models.test_tensor_parallel import Member, on_threads
from tests.models.test_tensor_parallel_load import Rank, Reads, assert_bitwise, counting_open
from tests.models.tp_ranks import on_ranks

THINKER = ThinkerConfig.preset("tiny")  # 4 query heads over 2 KV heads, 4 experts top-2
TALKER4 = replace(TalkerConfig.preset("tiny"), heads=4, kv_heads=2)  # the tiny talker has 2 heads: 4 for tp 4


class Causal:
    """Dense causal attention over one packed sequence (the KV engine's stand-in)."""

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                             is_causal=True, enable_gqa=True)  # [1, heads, N, d]
        return out[0].transpose(0, 1)  # [N, heads, d]


def sharded(whole: nn.Module, tp: int, run: Callable[[nn.Module], Any], keep: Callable[[str], bool] = lambda n: False
            ) -> list[Any]:
    def rank(group: Member) -> Any:
        shard = shard_in_place(copy.deepcopy(whole), group, keep)
        with torch.no_grad():
            return run(shard)

    return on_threads(tp, rank)


@pytest.mark.parametrize("tp", [2, 4])
def test_a_sharded_thinker_gives_the_whole_thinkers_states_and_logits(tp: int) -> None:
    whole = ThinkerLM(THINKER)
    lively(whole, 1)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(9, THINKER.hidden, generator=gen)  # [N, hidden]
    positions = torch.stack([torch.arange(9.0), torch.arange(9.0) % 3, torch.arange(9.0) % 2])  # [3, N]
    deepstack = Deepstack(torch.tensor([3, 4, 5]), torch.randn(2, 3, THINKER.hidden, generator=gen))

    def run(m: nn.Module) -> tuple[Tensor, Tensor, Tensor, bool]:
        hidden, accept = m(x, positions, Causal(), deepstack)
        return hidden, accept, m.logits(hidden), isinstance(m.model.layers[0].mlp, ExpertParallelMoE)

    with torch.no_grad():
        hidden, accept, logits, _ = run(whole.eval())
    for got_hidden, got_accept, got_logits, expert_parallel in sharded(whole, tp, run):
        assert expert_parallel
        torch.testing.assert_close(got_hidden, hidden, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got_accept, accept, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got_logits, logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tp", [2, 4])
def test_a_sharded_talker_decoder_gives_the_whole_decoders_states(tp: int) -> None:
    whole = tm.TalkerModel(TALKER4)
    lively_talker(whole, 3)
    x = torch.randn(2, 6, TALKER4.hidden, generator=torch.Generator().manual_seed(4))  # [B, T, hidden] dense
    positions = torch.arange(6.0).expand(3, 2, -1)  # [3, B, T]

    def run(m: nn.Module) -> tuple[Tensor, Tensor, bool]:
        kept = m.code_predictor.model.layers[0].self_attn.heads == TALKER4.predictor.heads
        return m.model(x, positions), m.model.codec_embedding.weight, kept

    with torch.no_grad():
        expected = whole.eval().model(x, positions)
    for hidden, codec, predictor_whole in sharded(whole, tp, run, replicated):
        torch.testing.assert_close(hidden, expected, rtol=1e-5, atol=1e-5)
        assert predictor_whole and torch.equal(codec, whole.model.codec_embedding.weight)  # replicated parts


# ---- the components over their paged KV engines ---------------------------------------------


def thinker_at(tp: int, rank: int) -> Thinker:
    base = spec()
    return Thinker(msgspec.structs.replace(base, ranks=list(range(tp)), tp=tp), rank, "cpu", preset="tiny", seed=5)


def converse(m: Thinker) -> tuple[list[Tensor], list[list[int]], tuple[int, int]]:
    rows = m.prefill_text([Call(0, "", ("a red fox",)), Call(1, "", ("jumps over the lazy dog",))])
    toks = [[t] for t in m.begin_reply([Call(0, "", (0.0, 1.0)), Call(1, "", (0.9, 0.9))])]
    for _ in range(4):
        prev = m.decode([Call(0, "", (toks[0][-1], 0.0, 1.0)), Call(1, "", (toks[1][-1], 0.9, 0.9))])
        for seq, t in zip(toks, prev):
            seq.append(t)
    return rows, toks, (m.kv.geometry.heads, m.kv.geometry.kv_heads, m.describe())


@pytest.mark.parametrize("tp", [2, 4])
def test_the_thinker_at_tp_gives_tp_1s_rows_and_tokens(tp: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(thinker_module, "init_random", lively)  # livelier weights than the preset's, on every rank
    rows, tokens, _ = converse(thinker_at(1, 0))
    for rank, (got_rows, got_tokens, (heads, kv_heads, said)) in enumerate(
            on_ranks(tp, "thinker", thinker_at, converse, monkeypatch)):
        assert got_tokens == tokens
        for got, want in zip(got_rows, rows):
            assert torch.equal(got, want)  # input embeddings: one real row and zeros, exact
        assert (heads, kv_heads) == (4 // tp, max(1, 2 // tp))
        assert f"tensor-parallel rank {rank} of {tp}; " in said


def talker_at(tp: int, rank: int) -> Talker:
    return Talker(msgspec.structs.replace(talker_spec(), ranks=list(range(tp)), tp=tp), rank, "cpu", preset="tiny",
                  seed=6)


def speak(m: Talker) -> list[list[int]]:
    user, reply = thinker_rows(5, 7), thinker_rows(4, 8)
    while m.prefill([call(1, user)]) == [PARTIAL]:
        pass
    frames = [m.last_prefill([call(1, reply[:1], "Ethan", 0.9, 50, 1.05)])[0]]
    for k in range(4):
        text = reply[k + 1:k + 2] if k + 1 < len(reply) else None
        frames.append(m.decode([call(1, frames[-1], text, 0.9, 50, 1.05)])[0])
    return [f.tolist() for f in frames]


def test_the_talker_at_tp_2_speaks_tp_1s_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tm, "init_random", lively_talker)
    frames = speak(talker_at(1, 0))
    assert len({tuple(f) for f in frames}) > 1  # the frames vary: a wrong shard shows
    for got in on_ranks(2, "talker", talker_at, speak, monkeypatch):
        assert got == frames


# ---- per-shard loading ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def miniature(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("Qwen3-Omni-tp")
    write_miniature(directory)
    return directory


PARTS: dict[str, Callable[..., Any]] = {
    "thinker": lambda ck, group: ck.load("thinker", lambda: ThinkerLM(ck.thinker_config), "cpu", torch.float32,
                                         group=group),
    "talker": lambda ck, group: ck.load_talker(lambda: tm.TalkerModel(ck.talker_config), "cpu", torch.float32,
                                               group, replicated),
}


@pytest.mark.parametrize("part", ["thinker", "talker"])
@pytest.mark.parametrize("rank", [0, 1])  # 2 query heads over 1 KV head and 4 experts: tp 2
def test_a_ranks_own_read_equals_the_whole_checkpoint_cut(miniature: Path, part: str, rank: int,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    keep = replicated if part == "talker" else (lambda n: False)
    whole_then_cut = shard_in_place(PARTS[part](Checkpoint(miniature), None), Rank(rank, 2), keep)
    reads = Reads()
    with monkeypatch.context() as patch:
        patch.setattr(weights_io, "safe_open", counting_open(reads))
        own = PARTS[part](Checkpoint(miniature), Rank(rank, 2))
    assert_bitwise(own, whole_then_cut)
    fetched = {**reads.whole, **reads.sliced}
    others = [n for n in fetched if ".experts." in n and int(n.split(".experts.")[1].split(".")[0]) // 2 != rank]
    assert not others, f"another rank's experts read: {others}"
    split = [n for n in reads.whole if "code_predictor" not in n and (  # the code predictor is replicated: whole
        n.endswith(("q_proj.weight", "o_proj.weight", "lm_head.weight", "shared_expert.down_proj.weight"))
        or n == "thinker.model.embed_tokens.weight")]
    assert not split, f"read whole: {split}"
    if part == "thinker":
        held = sum(p.numel() for p in own.parameters())
        assert sum(fetched.values()) == held  # exactly the shard's elements


@pytest.mark.parametrize(("build", "tp", "config", "message"), [
    (Thinker, 8, None, "qwen3_omni thinker: tp = 8 does not divide the 4 attention heads"),
    (Thinker, 8, replace(THINKER, heads=8, kv_heads=8), "qwen3_omni thinker: tp = 8 does not divide the 4 experts"),
    (Talker, 4, None, "qwen3_omni talker: tp = 4 does not divide the 2 attention heads"),
])
def test_a_degree_a_decoder_cannot_be_split_by_is_refused_naming_the_component(
        build: Any, tp: int, config: Any, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tp_group, "group_for", lambda name: Rank(0, tp))
    base = spec() if build is Thinker else talker_spec()
    kw = {"config": config} if config is not None else {"preset": "tiny"}
    with pytest.raises(ValueError, match=f"^{message}"):
        build(msgspec.structs.replace(base, ranks=list(range(tp)), tp=tp), 0, "cpu", **kw)
