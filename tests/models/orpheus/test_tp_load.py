"""Orpheus's LM at tp 2 from a checkpoint: each rank's component reads its own shard (the loader's
per-shard path, tests/models/test_tensor_parallel_load.py), bit for bit the whole model cut in place,
with no split tensor read whole. The group is a stand-in: building the component communicates
nothing (the forward over Gloo is tests/runtime/test_tensor_parallel_hosts.py)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import torch
from torch import Tensor
from wgc.models import weights_io
from wgc.models.layers import LlamaModel
from wgc.models.layers.tensor_parallel import shard_llama
from wgc.models.orpheus import LanguageModel, OrpheusConfig, load_llama, save_llama
from wgc.models.orpheus.llm import tiny_init
from wgc.runtime.worker import tp_group

from tests.models.orpheus.helpers import llm_spec
from tests.models.test_tensor_parallel_load import Rank, Reads, counting_open

CONFIG = OrpheusConfig.preset("tiny")


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = LlamaModel(CONFIG.llama)
    tiny_init(model, CONFIG, seed=7)
    return save_llama(model, CONFIG.hf_config(), tmp_path_factory.mktemp("orpheus-tp"), shards=2)


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_of_a_tp2_lm_reads_its_own_shard(hf_dir: Path, rank: int, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = msgspec.structs.replace(llm_spec(), ranks=[0, 1], tp=2)
    monkeypatch.setattr(tp_group, "group_for", lambda name: Rank(rank, 2) if name == "llm" else None)
    reads = Reads()
    with monkeypatch.context() as patch:
        patch.setattr(weights_io, "safe_open", counting_open(reads))
        lm = LanguageModel(spec, rank, "cpu", weights=hf_dir)
    expected = shard_llama(load_llama(hf_dir, CONFIG.llama), Rank(rank, 2)).state_dict()
    got: dict[str, Tensor] = lm.model.state_dict()
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(got[name], value), name
    split = [n for n in reads.whole if "proj" in n or "embed" in n or "lm_head" in n]
    assert not split and reads.sliced, split  # every split tensor came through get_slice, none whole
