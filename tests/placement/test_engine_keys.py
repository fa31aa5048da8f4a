"""The engine keys that mean something only to a kv component are marked so in the schema
(`kv_only` in spec.py's EngineTable), and that mark is the whole rule: written in a stateless
component's own table, exactly those keys are refused, and `[defaults.engine]` gives them to kv
components only."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.placement.helpers import rendered, stand_in, write
from wgc.placement import load_placement

BASE = ('[cluster]\ndevice = "cpu"\nranks = 1\nmemory = "16GiB"\n[defaults]\nranks = 0\n'
        '[components.llm]\nranks = 0\nengine = { kv_memory = "2GiB" }\n[components.snac]\nranks = 0\n')
# Each engine key, a valid value for it, and whether only a kv component may have it.
KEYS = {"kv_memory_fraction": ("0.5", True), "kv_memory": ('"64MiB"', True), "page_size": ("32", True),
        "token_budget": ("256", True), "prefill_token_budget": ("4096", True), "prefix_caching": ("false", True),
        "max_batch": ("8", False),
        "cuda_graph_buckets": ("[]", False)}


@pytest.mark.parametrize("name", KEYS)
def test_a_kv_key_in_a_stateless_components_table_is_refused(tmp_path: Path, name: str) -> None:
    value, kv_only = KEYS[name]
    text = BASE + f"[components.snac.engine]\n{name} = {value}\n"
    loaded, diags = load_placement(write(tmp_path, "p.toml", text), stand_in("orpheus"))
    if not kv_only:
        assert loaded is not None and not diags, rendered(diags)
        return
    assert loaded is None
    assert [(d.code, d.span.line, d.message) for d in diags] == [
        ("P018", len(text.splitlines()), f"`{name}` applies to kv components; snac is stateless")], rendered(diags)


def test_defaults_give_kv_keys_to_kv_components_only(tmp_path: Path) -> None:
    text = BASE + "[defaults.engine]\npage_size = 32\ntoken_budget = 256\nprefix_caching = false\nmax_batch = 8\n"
    loaded, diags = load_placement(write(tmp_path, "p.toml", text), stand_in("orpheus"))
    assert loaded is not None, rendered(diags)
    llm, snac = loaded.component("llm"), loaded.component("snac")
    assert llm is not None and snac is not None
    assert (llm.engine.page_size, llm.engine.token_budget, llm.engine.prefix_caching) == (32, 256, False)
    assert (snac.engine.page_size, snac.engine.token_budget, snac.engine.prefix_caching) == (16, 512, True)
    assert (llm.engine.max_batch, snac.engine.max_batch) == (8, 8)
