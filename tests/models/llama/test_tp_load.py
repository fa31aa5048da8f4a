"""The llama family's `lm` at tp 2: each rank's component is its shard of the one model. From a
generated miniature checkpoint (transformers' own save_pretrained, several files and an index) each
rank reads only its parts, bit for bit the whole model cut in place; from random weights each rank
cuts the seed's whole model; a degree the model cannot be split by fails in one line. The group is
a stand-in (building the component communicates nothing); the forward over Gloo across two hosts
is tests/runtime/test_llama_tp_hosts.py."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import torch
from wgc.models import weights_io
from wgc.models.layers.llama_weights import load_llama
from wgc.models.layers.paged_llama import random_llama
from wgc.models.layers.tensor_parallel import shard_llama
from wgc.models.llama import ChatModel, LlamaChatConfig
from wgc.runtime.worker import tp_group

from tests.models.llama.checkpoint import write_checkpoint
from tests.models.llama.helpers import lm_spec
from tests.models.test_tensor_parallel_load import Rank, Reads, assert_bitwise, counting_open


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("llama-tp")
    write_checkpoint(directory, seed=3)
    assert len(list(directory.glob("*.safetensors"))) > 1  # shards with an index, as large checkpoints come
    return directory


def tp_spec(tp: int) -> msgspec.Struct:
    return msgspec.structs.replace(lm_spec(), ranks=list(range(tp)), tp=tp)


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_of_a_tp2_lm_reads_only_its_own_shard(hf_dir: Path, rank: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tp_group, "group_for", lambda name: Rank(rank, 2) if name == "lm" else None)
    reads = Reads()
    with monkeypatch.context() as patch:
        patch.setattr(weights_io, "safe_open", counting_open(reads))
        lm = ChatModel(tp_spec(2), rank, "cpu", weights=hf_dir)
    config = LlamaChatConfig.from_directory(hf_dir).llama
    assert_bitwise(lm.model, shard_llama(load_llama(hf_dir, config), Rank(rank, 2)))
    assert lm.model.config.heads == config.heads // 2 and lm.model.config.kv_heads == config.kv_heads // 2
    split = [n for n in reads.whole if "proj" in n or "embed" in n or "lm_head" in n]
    assert not split and reads.sliced, split  # every split tensor came through get_slice, none whole
    held = sum(p.numel() for p in lm.model.parameters())
    assert sum(reads.sliced.values()) + sum(reads.whole.values()) == held  # read exactly what it holds


@pytest.mark.parametrize("rank", [0, 1])
def test_random_weights_at_tp2_are_the_seeds_whole_model_cut(rank: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tp_group, "group_for", lambda name: Rank(rank, 2) if name == "lm" else None)
    lm = ChatModel(tp_spec(2), rank, "cpu", preset="tiny", seed=5)
    whole = random_llama(LlamaChatConfig.preset("tiny").llama, torch.device("cpu"), torch.float32, 5)
    assert_bitwise(lm.model, shard_llama(whole, Rank(rank, 2)))
    assert f"tensor-parallel rank {rank} of 2" in lm.describe()  # what `wgc run` prints at start-up


def test_a_degree_the_model_cannot_be_split_by_fails_in_one_line_before_anything_is_read(
        hf_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tp_group, "group_for", lambda name: Rank(0, 3) if name == "lm" else None)
    with pytest.raises(ValueError, match=r"^llama lm: tp = 3 does not divide the 4 attention heads$"):
        ChatModel(tp_spec(3), 0, "cpu", preset="tiny")
    reads = Reads()
    monkeypatch.setattr(weights_io, "safe_open", counting_open(reads))
    with pytest.raises(ValueError, match=r"^llama lm: tp = 3 does not divide the 4 attention heads$"):
        ChatModel(tp_spec(3), 0, "cpu", weights=hf_dir)
    assert not reads.whole and not reads.sliced


def test_tp2_outside_a_worker_names_the_missing_process_group() -> None:
    with pytest.raises(ValueError, match="lm: tp = 2 needs its process group"):
        ChatModel(tp_spec(2), 0, "cpu", preset="tiny")
