"""A tensor-parallel rank reads only its shard from the checkpoint: on a generated miniature Hugging Face
Llama directory (the real key layout, f32, one file or shards with an index), load_llama with a
group gives, bit for bit, the shard that loading the whole model and cutting it in place gives
(shard_llama), for sharded and for replicated KV heads, tied and untied heads; and the bytes it asks
safetensors for are exactly its parts (every read counted through a wrapper of safe_open)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from torch import Tensor
from wgc.models import weights_io
from wgc.models.layers.config import LlamaConfig
from wgc.models.layers.llama_weights import expected_shapes, load_llama, save_llama
from wgc.models.layers.paged_llama import random_llama
from wgc.models.layers.tensor_parallel import shard_cuts, shard_llama

from tests.models.safe_open_proxy import SafeOpenProxy

# 8 query heads over 2 KV heads: tp 2 shards the KV heads, tp 4 and 8 replicate each; 301 rows split unevenly.
UNTIED = LlamaConfig(vocab=301, hidden=64, layers=2, heads=8, kv_heads=2, head_dim=16, intermediate=96,
                     rope_scaling=None, max_positions=256)
TIED = LlamaConfig(vocab=301, hidden=64, layers=2, heads=8, kv_heads=2, head_dim=16, intermediate=96,
                   rope_scaling=None, max_positions=256, tie_embeddings=True)


class Rank:
    """A group member for loading: reading a shard needs no collective."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size

    def all_reduce(self, t: Tensor) -> Tensor:
        raise AssertionError("loading a shard must not communicate")

    def all_gather(self, t: Tensor) -> list[Tensor]:
        raise AssertionError("loading a shard must not communicate")


def checkpoint(root: Path, config: LlamaConfig, shards: int) -> Path:
    model = random_llama(config, torch.device("cpu"), torch.float32, seed=11)
    return save_llama(model, config.to_hf(), root / f"{'tied' if config.tie_embeddings else 'untied'}-{shards}",
                      shards=shards)


@pytest.fixture(scope="module")
def directories(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[bool, int], Path]:
    root = tmp_path_factory.mktemp("tp-checkpoints")
    return {(c.tie_embeddings, n): checkpoint(root, c, n) for c in (UNTIED, TIED) for n in (1, 3)}


class Reads:
    """Every element a load fetched from safetensors, by tensor name: whole tensors and slices apart."""

    def __init__(self) -> None:
        self.sliced: dict[str, int] = {}
        self.whole: dict[str, int] = {}


class CountingSlice:
    def __init__(self, inner: Any, name: str, reads: Reads) -> None:
        self.inner, self.name, self.reads = inner, name, reads

    def __getitem__(self, index: Any) -> Tensor:
        out = self.inner[index]
        self.reads.sliced[self.name] = self.reads.sliced.get(self.name, 0) + out.numel()
        return out

    def get_shape(self) -> list[int]:
        return self.inner.get_shape()

    def get_dtype(self) -> str:
        return self.inner.get_dtype()


def counting_open(reads: Reads) -> Any:
    """A stand-in for safetensors.safe_open that counts what is fetched through it."""

    class Counting(SafeOpenProxy):
        def sliced(self, name: str, piece: Any) -> CountingSlice:
            return CountingSlice(piece, name, reads)

        def fetched(self, name: str, tensor: Tensor) -> Tensor:
            reads.whole[name] = reads.whole.get(name, 0) + tensor.numel()
            return tensor

    return Counting


def assert_bitwise(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert sa[name].shape == sb[name].shape, name
        assert torch.equal(sa[name].view(torch.int32), sb[name].view(torch.int32)), name  # the bits, not the values


@pytest.mark.parametrize("tp", [2, 4])  # 2: KV heads sharded; 4: each KV head replicated on two ranks
@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("shards", [1, 3])
def test_a_ranks_own_read_equals_the_whole_checkpoint_cut(directories: dict[tuple[bool, int], Path], tp: int,
                                                          tied: bool, shards: int) -> None:
    config = TIED if tied else UNTIED
    directory = directories[(tied, shards)]
    for rank in range(tp):
        whole_then_cut = shard_llama(load_llama(directory, config), Rank(rank, tp))
        own = load_llama(directory, config, group=Rank(rank, tp))
        assert_bitwise(own, whole_then_cut)
        assert own.config == whole_then_cut.config
        if tied:
            assert own.lm_head.weight is own.embed_tokens.weight


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_a_rank_fetches_only_its_parts(directories: dict[tuple[bool, int], Path], tp: int,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    directory, expected = directories[(False, 3)], expected_shapes(UNTIED)
    total = sum(torch.Size(s).numel() for s in expected.values())
    for rank in range(tp):
        reads = Reads()
        monkeypatch.setattr(weights_io, "safe_open", counting_open(reads))
        model = load_llama(directory, UNTIED, group=Rank(rank, tp))
        monkeypatch.undo()
        cuts = shard_cuts(UNTIED, tp, rank)
        for name, shape in expected.items():
            cut = cuts.get(name.removeprefix("model."))
            if cut is None:  # a norm: kept whole, read whole
                assert reads.whole.get(name) == torch.Size(shape).numel() and name not in reads.sliced, name
                continue
            part = list(shape)
            part[cut.dim] = cut.end - cut.start
            assert name not in reads.whole, f"{name} was read whole"
            assert reads.sliced.get(name) == torch.Size(part).numel(), name
        fetched = sum(reads.sliced.values()) + sum(reads.whole.values())
        held = sum(p.numel() for p in model.parameters())
        assert fetched == held < total  # exactly what the shard holds, less than the checkpoint


def test_the_kv_heads_a_rank_reads_are_the_ones_its_query_heads_share(directories: dict[tuple[bool, int], Path]) -> None:
    """At tp 4 over 2 KV heads ranks 0-1 read KV head 0, ranks 2-3 KV head 1 (rows 0-15, 16-31)."""
    directory = directories[(False, 1)]
    with safe_open(str(directory / "model.safetensors"), framework="pt") as f:
        k = f.get_tensor("model.layers.1.self_attn.k_proj.weight")  # [kv_heads * head_dim, hidden]
    for rank in range(4):
        own = load_llama(directory, UNTIED, group=Rank(rank, 4))
        head = rank // 2
        assert torch.equal(own.layers[1].self_attn.k_proj.weight, k[head * 16:(head + 1) * 16])
        assert own.layers[1].self_attn.kv_heads == 1 and own.config.kv_heads == 1


def test_one_rank_reads_the_whole_model(directories: dict[tuple[bool, int], Path]) -> None:
    directory = directories[(False, 3)]
    assert_bitwise(load_llama(directory, UNTIED, group=Rank(0, 1)), load_llama(directory, UNTIED))
