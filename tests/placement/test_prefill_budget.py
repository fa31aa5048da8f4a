"""`prefill_token_budget`: the tokens of a round in which a kv component decodes nothing. Its
default by device (2048 on cpu, 8192 on cuda), raised to the component's token budget; a value
given below the token budget is P018 at the value, whether the two come from one table, from two,
or the budget is the default; and the compiled plan carries it to the runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.placement.helpers import rendered, stand_in, write
from wgc.placement import load_placement

CPU = ('[cluster]\ndevice = "cpu"\nranks = 1\nmemory = "16GiB"\n[defaults]\nranks = 0\n'
       '[defaults.engine]\nkv_memory = "2GiB"\n')
CUDA = '[cluster]\ndevice = "cuda"\ngpu = "H100"\nranks = 1\n[defaults]\nranks = 0\n[defaults.engine]\nkv_memory = "2GiB"\n'


def _llm(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    loaded, diags = load_placement(write(tmp_path, "p.toml", text), stand_in("orpheus"))
    assert loaded is not None, rendered(diags)
    llm = loaded.component("llm")
    assert llm is not None
    return llm.engine


@pytest.mark.parametrize(("text", "budget", "prefill"), [
    (CPU, 512, 2048),
    (CUDA, 8192, 8192),
    (CPU + "token_budget = 4096\n", 4096, 4096),  # raised to the token budget
    (CPU + "prefill_token_budget = 1024\n", 512, 1024),
    (CPU + "max_batch = 1024\n", 1024, 2048),  # a token budget raised to max_batch, and the prefill one above it
])
def test_the_prefill_budget_by_device_and_as_given(tmp_path: Path, text: str, budget: int, prefill: int) -> None:
    engine = _llm(tmp_path, text)
    assert (engine.token_budget, engine.prefill_token_budget) == (budget, prefill)


def test_a_components_own_table_overrides_the_defaults(tmp_path: Path) -> None:
    text = CPU + "prefill_token_budget = 1024\n[components.llm]\nranks = 0\nengine = { prefill_token_budget = 3000 }\n"
    assert _llm(tmp_path, text).prefill_token_budget == 3000


@pytest.mark.parametrize(("text", "line"), [
    (CPU + "token_budget = 1024\nprefill_token_budget = 600\n", 10),  # one table
    (CPU + "prefill_token_budget = 300\n", 9),  # below the default token budget, 512
    (CPU + "token_budget = 1024\n[components.llm]\nranks = 0\nengine = { prefill_token_budget = 600 }\n", 12),
])
def test_a_prefill_budget_below_the_token_budget_is_p018_at_its_value(tmp_path: Path, text: str, line: int) -> None:
    loaded, diags = load_placement(write(tmp_path, "p.toml", text), stand_in("orpheus"))
    assert loaded is None
    found = [d for d in diags if d.code == "P018" and "prefill_token_budget" in d.message]
    assert found, rendered(diags)
    assert {d.span.line for d in found} == {line}, rendered(diags)
    assert "smaller than the token budget" in found[0].message


def test_the_plan_carries_it_to_the_runtime(tmp_path: Path) -> None:
    from wgc.compile import compile_program
    from wgc.plan.file import decode_plan

    root = Path(__file__).resolve().parents[2]
    placement = write(tmp_path, "p.toml", f'extends = "{root / "placements" / "llama-cpu.toml"}"\n'
                      "[defaults.engine]\nprefill_token_budget = 3072\n")
    source = root / "models" / "llama.walk"
    result = compile_program(str(source), source.read_text(encoding="utf-8"), str(placement))
    assert result.data is not None, [d.message for d in result.diagnostics]
    settings = {c.name: c.settings for c in decode_plan(result.data)[1].components}
    assert settings["lm"]["prefill_token_budget"] == 3072 and settings["lm"]["token_budget"] == 2048  # llama-cpu.toml's own
