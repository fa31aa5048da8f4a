"""The llama family at tp 2 across two hosts: `lm` over Gloo, one shard on each of two loopback
"hosts" (each its own process tree, the real CLI), gives tp 1's greedy tokens for chat requests in
flight together (prompts rendered by the tiny chat template), on the tiny preset's random weights
and from a generated miniature Hugging Face checkpoint that each rank reads its own shard of
(tests/models/llama/test_tp_load.py checks the reads). Float32 throughout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from wgc.models.llama.tokenizer import tiny_tokenizer
from wgc.runtime.http.text.template import ChatTemplate

from tests.models.llama.checkpoint import write_checkpoint
from tests.runtime.hosts import HEAD, Hosts, compiled, stderr
from tests.runtime.test_multihost import head_run, outputs_by_request
from wgc.plan.file import load_plan
from wgc.plan.text import plan_text

CHATS = [[{"role": "user", "content": "Hello"}],
         [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story"}],
         [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "more"}]]


def chat_docs() -> list[dict[str, Any]]:
    tokenizer = tiny_tokenizer()
    template = ChatTemplate(tokenizer.chat_template, specials=tokenizer.template_tokens)
    return [{"params": {"max_tokens": n, "temperature": 0.0}, "inputs": {"prompt": tokenizer.encode(template.text(m))}}
            for m, n in zip(CHATS, (24, 40, 16), strict=True)]


def test_inspect_shows_the_llama_tensor_parallel_group(tmp_path: Path) -> None:
    text = plan_text(load_plan(compiled(tmp_path, "llama", "llama-tp2-hosts.toml", port=30040))[1])
    assert "tensor-parallel groups: (gloo, inter_host gloo)\n  lm: ranks [0, 1]" in text
    assert "node1 (node rank 1)  127.0.0.3  ranks [1]  ports 30051" in text


def test_two_placements_compiled_on_one_port_keep_their_own_plans(tmp_path: Path) -> None:
    """`compiled` draws a random port per call: two draws in one test may meet (the tp 2 plan was once
    overwritten by the tp 1 plan compiled after it, and the test below failed on its tp)."""
    tp2 = compiled(tmp_path, "llama", "llama-tp2-hosts.toml", port=30080)
    tp1 = compiled(tmp_path, "llama", "cpu.toml", port=30080, extra='model = "llama"')
    assert tp2 != tp1
    assert [c.tp for c in load_plan(tp2)[1].components if c.name == "lm"] == [2]


@pytest.mark.parametrize("weights", ["preset", "checkpoint"])
def test_llama_lm_at_tp2_across_two_hosts_gives_the_tokens_of_tp1(tmp_path: Path, weights: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if weights == "checkpoint":  # every host reads the same directory (its environment), each rank its own parts
        write_checkpoint(tmp_path / "hf", seed=5)
        monkeypatch.setenv("WGC_LLAMA_DIR", str(tmp_path / "hf"))
    else:
        monkeypatch.delenv("WGC_LLAMA_DIR", raising=False)
    tp2 = compiled(tmp_path, "llama", "llama-tp2-hosts.toml")
    tp1 = compiled(tmp_path, "llama", "cpu.toml", extra='model = "llama"')
    assert [c.tp for c in load_plan(tp2)[1].components if c.name == "lm"] == [2]
    docs = chat_docs()
    with Hosts(tmp_path) as hosts:
        node = hosts.start(str(tp2), "--headless", "--node-rank", "1", "--master-addr", HEAD)
        got = outputs_by_request(head_run(hosts, tp2, docs))  # three requests in flight together
        assert node.wait(timeout=20) == 0
        lines = stderr(hosts.procs[1])  # the head shows every rank's start-up lines
        expected = outputs_by_request(head_run(hosts, tp1, docs))
    source = str(tmp_path / "hf") if weights == "checkpoint" else "tiny preset, random weights"
    for rank in (0, 1):
        assert f"rank {rank}: lm tensor-parallel group [0, 1] connected over gloo" in lines
        assert f"({source}; tensor-parallel rank {rank} of 2; " in lines  # its shard, not a whole model
    assert got.keys() == expected.keys() and len(got) == 3
    for k in got:
        assert got[k]["text"] == expected[k]["text"] and len(got[k]["text"]) > 1, k
