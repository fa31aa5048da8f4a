"""Shard arithmetic in one process: a tp-way Llama, its collectives done by threads summing and
gathering the shards' tensors, gives the whole model's logits (a dense forward), for sharded KV
heads and for KV heads replicated when tp exceeds them. The paged path over Gloo between processes
is tests/runtime/test_tensor_parallel_hosts.py."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor
from wgc.models.layers.config import LlamaConfig
from wgc.models.layers.paged_llama import random_llama
from wgc.models.layers.tensor_parallel import check_tp, shard_llama, split


class ThreadGroup:
    """`size` threads, one per rank, meeting at a barrier for each collective."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.barrier = threading.Barrier(size)
        self.slots: list[Any] = [None] * size

    def member(self, rank: int) -> Member:
        return Member(self, rank)


class Member:
    def __init__(self, hub: ThreadGroup, rank: int) -> None:
        self.hub, self.rank, self.size = hub, rank, hub.size
        self.calls = 0

    def _exchange(self, t: Tensor) -> list[Tensor]:
        self.calls += 1
        self.hub.slots[self.rank] = t.clone()
        self.hub.barrier.wait()
        out = list(self.hub.slots)
        self.hub.barrier.wait()  # nobody overwrites a slot before everyone has read them all
        return out

    def all_reduce(self, t: Tensor) -> Tensor:
        parts = self._exchange(t)
        t.copy_(torch.stack(parts).sum(0))
        return t

    def all_gather(self, t: Tensor) -> list[Tensor]:
        return self._exchange(t)


def on_threads(size: int, work: Callable[[Member], Any]) -> list[Any]:
    hub, results, errors = ThreadGroup(size), [None] * size, []

    def run(rank: int) -> None:
        try:
            results[rank] = work(hub.member(rank))
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)
            hub.barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    return results


CONFIG = LlamaConfig(vocab=301, hidden=64, layers=2, heads=8, kv_heads=2, head_dim=16, intermediate=96,
                     rope_scaling=None, max_positions=256)


@pytest.mark.parametrize("tp", [2, 4, 8])  # 2: KV heads sharded; 4 and 8: each KV head replicated
def test_a_sharded_llama_gives_the_whole_models_logits(tp: int) -> None:
    torch.manual_seed(0)
    tokens = torch.randint(0, CONFIG.vocab, (2, 7))
    positions = torch.arange(7).expand(2, -1)
    whole = random_llama(CONFIG, torch.device("cpu"), torch.float32, seed=3)
    with torch.no_grad():
        expected = whole(tokens, positions)  # [2, 7, vocab]

    def shard(group: Member) -> tuple[Tensor, LlamaConfig, int]:
        model = shard_llama(copy.deepcopy(whole), group)  # the same weights on every rank (one RNG: no threads)
        with torch.no_grad():
            return model(tokens, positions), model.config, model.embed_tokens.weight.shape[0]

    results = on_threads(tp, shard)
    for logits, config, rows in results:
        assert logits.shape == expected.shape
        torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
        assert config.heads == 8 // tp and config.kv_heads == max(1, 2 // tp) and config.vocab == 301
        assert rows in (301 // tp, 301 // tp + 1)  # each rank holds its vocabulary part only


def test_a_shard_without_its_collectives_is_not_the_whole_model() -> None:
    """The reduction is what makes shards whole: a group that does not sum gives other logits."""

    class Alone:
        rank, size = 0, 2

        def all_reduce(self, t: Tensor) -> Tensor:
            return t

        def all_gather(self, t: Tensor) -> list[Tensor]:
            return [t, torch.zeros_like(t)]

    tokens, positions = torch.tensor([[1, 2, 3]]), torch.arange(3)[None]
    whole = random_llama(CONFIG, torch.device("cpu"), torch.float32, seed=3)
    part = shard_llama(random_llama(CONFIG, torch.device("cpu"), torch.float32, seed=3), Alone())
    with torch.no_grad():
        assert not torch.allclose(part(tokens, positions), whole(tokens, positions), atol=1e-3)


def test_split_covers_every_item_once() -> None:
    for n, size in ((301, 4), (8, 8), (5, 2)):
        parts = [split(n, size, r) for r in range(size)]
        assert parts[0][0] == 0 and parts[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))


def test_degrees_that_do_not_split_a_layer_are_refused() -> None:
    with pytest.raises(ValueError, match="tp = 3 does not divide the 8 attention heads"):
        check_tp(8, 2, 96, 3)
    with pytest.raises(ValueError, match="does not divide the MLP's 90 intermediate"):
        check_tp(8, 2, 90, 4)
