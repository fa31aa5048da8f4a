"""A speculative iteration that is rolled back leaves nothing behind: not in the KV cache (the
label's history, tests/runtime/test_semantics.py) and not in the walk's values, which the loop's
terminal yield and its carries hand on after the loop."""

from __future__ import annotations

from pathlib import Path

import pytest
from wgc.runtime.coordinator.request import RequestSpec

from tests.runtime.cluster import ToyCluster, compile_text, cpu_placement

PROGRAM = """
model rollback
import tests.runtime.toys as toy
param stop_at: int = 1000 in 0..1000
component llm: toy.Counter engine kv {
    prefill(prompt: text) -> token
    decode(prev: token) -> token
}
walk gen(prompt: text) {
    first = llm.prefill(prompt)
    loop until tok == stop_at max 50 carry tok = first NOSPEC {
        tok = llm.decode(tok)
    } yield terminal tok
    emit text tok
}
flow { start -> gen -> done }
"""


@pytest.mark.parametrize("nospec", [False, True], ids=["spec", "nospec"])
def test_the_value_after_the_loop_is_the_last_kept_iteration_s(tmp_path: Path, nospec: bool) -> None:
    plan = compile_text(tmp_path, PROGRAM.replace("NOSPEC", "nospec" if nospec else ""), cpu_placement(1))
    cluster = ToyCluster(plan)
    out = cluster.run([RequestSpec(params={"stop_at": 6}, inputs={"prompt": "abc"})])
    assert next(iter(out.values()))["text"] == [6]  # prefill 3, decodes 4, 5, 6: the loop stops at 6
    decodes = sum(n for entry, n in cluster.component("llm").batches if entry == "decode")
    assert decodes == (3 if nospec else 4)  # with speculation a fourth decode (7) ran and was rolled back
    assert not cluster.leftovers()
