"""The per-rank memory estimate and the overflow message: the arithmetic, term by term."""

from __future__ import annotations

from pathlib import Path

from tests.placement.helpers import rendered, stand_in, write
from wgc.lang import ast
from wgc.lang.parser import parse
from wgc.placement import capacity_of, estimate_memory, load_placement
from wgc.placement.memory import GRAPH_ACTIVATION_FACTOR, GRAPH_FIXED_BYTES, RUNTIME_RESERVE
from wgc.placement.tables import GPU_MEMORY_MIB

GIB, MIB = 2**30, 2**20
H100 = GPU_MEMORY_MIB["H100"] * MIB


def program(weights: str = "8B", dtype: str = "bf16", stream: str = "token", extra: str = "") -> ast.Program:
    """A two-component model: a kv `llm` streaming items to a stateless `dec`."""
    text = f"""
model m
import m as m
component llm: m.L engine kv {{
    step(x: token) -> {stream}
    weights = {weights}
    dtype = {dtype}
    kv_layers = 32
    kv_heads = 8
    head_dim = 128
    max_seq_len = 4096
    {extra}
}}
component dec: m.D engine stateless {{
    run(x: {stream}) -> audio
    weights = 100M
    dtype = f32
}}
stream s: {stream} from llm to dec fixed(4)
walk w(x: token) {{ send llm.step(x) -> s }}
walk out(c: {stream}) on s {{ emit audio dec.run(c) }}
flow {{ start -> w -> done }}
"""
    result = parse(text, "m.walk")
    assert result.program is not None, result.diagnostics
    return result.program


def gpu_placement(tmp_path: Path, fraction: float, ranks: int = 1, llm: str = "ranks = 0", extra: str = "") -> Path:
    return write(tmp_path, "p.toml", f"""
[cluster]
device = "cuda"
gpu = "H100"
ranks = {ranks}
[defaults]
ranks = 0
[components.llm]
{llm}
engine = {{ kv_memory_fraction = {fraction}, cuda_graph_buckets = [1, 2, 4, 8] }}
{extra}
""")


def test_overflow_prints_every_term_of_the_arithmetic(tmp_path: Path) -> None:
    _, diags = load_placement(gpu_placement(tmp_path, 0.95), program())
    assert [d.code for d in diags] == ["P022"]
    d = diags[0]
    weights = 8 * 10**9 * 2
    kv = int(0.95 * H100)
    graphs = 4 * GRAPH_FIXED_BYTES
    dec = 100 * 10**6 * 4
    stream = 64 * 8 * 16  # default capacity 64 items × 8 B tokens × dec's default max_batch 16
    total = weights + kv + graphs + dec + stream + RUNTIME_RESERVE["cuda"]
    assert d.message.startswith(f"rank 0 needs {total / GIB:.2f} GiB but has 79.65 GiB (H100)")
    text = "\n".join(d.help)
    assert "8B params × 2 B (bf16)" in text and f"{weights / GIB:.2f} GiB" in text
    assert "0.95 × 79.65 GiB" in text and f"{kv / GIB:.2f} GiB" in text
    assert "4 × 16.00 MiB (buckets 1, 2, 4, 8)" in text
    assert "100M params × 4 B (f32)" in text
    assert "64 items × 8 B × 16 requests" in text
    assert "CUDA context" in text
    assert f"> {H100 / GIB:.2f} GiB" in text
    assert "lower its kv_memory_fraction" in d.help[-1]  # the KV pool is the largest item
    assert d.span.line == 4  # cluster.gpu, where the budget comes from


def test_kv_tokens_and_tp(tmp_path: Path) -> None:
    path = gpu_placement(tmp_path, 0.5, ranks=2, llm='ranks = [0, 1]\ntp = 2')
    loaded, diags = load_placement(path, program())
    assert loaded is not None, rendered(diags)
    table = estimate_memory(loaded, program())
    rank1 = table.ranks[1]
    weights = next(line for line in rank1.lines if line.kind == "weights")
    assert weights.bytes == 8 * 10**9 * 2 // 2 and "/ tp 2" in weights.formula
    per_token = 2 * 32 * (8 // 2) * 128 * 2
    pool = int(0.5 * H100)
    tokens = pool // (16 * per_token) * 16
    assert {(k.rank, k.tokens) for k in table.kv} == {(0, tokens), (1, tokens)}
    assert {line.owner for line in rank1.lines} == {"llm", ""}  # dec stays on rank 0


def test_graph_pool_counts_activations_when_hidden_is_declared(tmp_path: Path) -> None:
    prog = program(extra="hidden = 4096")
    loaded, _ = load_placement(gpu_placement(tmp_path, 0.3), prog)
    assert loaded is not None
    line = next(x for x in estimate_memory(loaded, prog).ranks[0].lines if x.kind == "cuda graphs")
    assert line.bytes == 4 * GRAPH_FIXED_BYTES + (1 + 2 + 4 + 8) * 4096 * 2 * GRAPH_ACTIVATION_FACTOR


def test_stream_buffer_from_the_item_type(tmp_path: Path) -> None:
    prog = program(stream="token[16]")
    extra = "[streams.s]\ncapacity = 32"
    loaded, diags = load_placement(gpu_placement(tmp_path, 0.3, extra=extra), prog)
    assert loaded is not None, rendered(diags)
    line = next(x for x in estimate_memory(loaded, prog).ranks[0].lines if x.kind == "stream")
    assert line.bytes == 32 * 16 * 8 * 16 and line.formula == "32 items × 16 × 8 B × 16 requests"


def test_symbolic_dims_come_from_the_placement(tmp_path: Path) -> None:
    prog = program(stream="tensor[N, D; f16]")
    extra = "[streams.s]\ndims = { N = 3, D = 1024 }"
    loaded, diags = load_placement(gpu_placement(tmp_path, 0.3, extra=extra), prog)
    assert loaded is not None, rendered(diags)
    line = next(x for x in estimate_memory(loaded, prog).ranks[0].lines if x.kind == "stream")
    assert line.bytes == 64 * 3 * 1024 * 2 * 16


def test_a_stream_that_cannot_be_sized_on_a_bounded_rank(tmp_path: Path) -> None:
    prog = program(stream="tensor[N, D; f16]")
    _, diags = load_placement(gpu_placement(tmp_path, 0.3), prog)
    assert [(d.code, d.span.file) for d in diags] == [("P021", "m.walk")]
    assert "dim `N` of the item type has no size" in diags[0].message


def test_item_bytes_overrides_the_type(tmp_path: Path) -> None:
    prog = program(stream="tensor[N, D; f16]")
    loaded, diags = load_placement(gpu_placement(tmp_path, 0.3, extra="[streams.s]\nitem_bytes = 100"), prog)
    assert loaded is not None and not diags, rendered(diags)  # N and D have no size: item_bytes stands in
    line = next(x for x in estimate_memory(loaded, prog).ranks[0].lines if x.kind == "stream")
    assert line.bytes == 64 * 100 * 16  # default capacity 64 items × 100 B × dec's default max_batch 16


def test_an_unbounded_cpu_rank_is_shown_but_not_checked(tmp_path: Path) -> None:
    path = write(tmp_path, "cpu.toml", '[cluster]\ndevice = "cpu"\nranks = 1\n[defaults]\nranks = 0\n'
                 'engine = { kv_memory = "8MiB" }\n')
    prog = program(weights="900B")
    loaded, diags = load_placement(path, prog)
    assert loaded is not None, rendered(diags)
    table = estimate_memory(loaded, prog)
    assert table.ranks[0].budget is None and table.ranks[0].fits
    assert table.kv[0].tokens is not None and table.kv[0].tokens < 4096  # not enforced: unbounded
    assert "rank 0: unbounded" in table.render()


def test_a_cpu_budget_is_checked(tmp_path: Path) -> None:
    path = write(tmp_path, "cpu.toml", '[cluster]\ndevice = "cpu"\nmemory = "4GiB"\nranks = 1\n'
                 "[defaults]\nranks = 0\nengine = { kv_memory_fraction = 0.25 }\n")
    _, diags = load_placement(path, program(weights="3B"))
    assert [d.code for d in diags] == ["P022"]
    text = "\n".join(diags[0].help)
    assert "0.25 × 4.00 GiB" in text and "3B params × 2 B (bf16)" in text
    assert "CUDA" not in text  # no reserve on a CPU rank


def cpu_budget(tmp_path: Path, memory: str, kv_memory: str) -> Path:
    return write(tmp_path, "cpu.toml", f'[cluster]\ndevice = "cpu"\nmemory = "{memory}"\nranks = 1\n'
                 f'[defaults]\nranks = 0\nengine = {{ kv_memory = "{kv_memory}" }}\n')


def test_a_cpu_kv_pool_counts_its_decode_mirror(tmp_path: Path) -> None:
    # 100M f32 weights of dec + 1B bf16 of llm (~2.23 GiB) + a 1 GiB pool fits 4 GiB alone; with the
    # pool's mirror counted again it needs ~4.23 GiB
    prog = program(weights="1B")
    fits, diags = load_placement(cpu_budget(tmp_path, "5GiB", "1GiB"), prog)
    assert fits is not None, rendered(diags)
    lines = {(line.kind, line.owner): line.bytes for line in estimate_memory(fits, prog).ranks[0].lines}
    assert lines[("kv mirror", "llm")] == lines[("kv pool", "llm")] == GIB
    assert ("kv mirror", "dec") not in lines  # a stateless component keeps no KV
    _, diags = load_placement(cpu_budget(tmp_path, "4GiB", "1GiB"), prog)
    assert [d.code for d in diags] == ["P022"], rendered(diags)
    assert any(h.startswith("  kv mirror   llm") and h.endswith("1.00 GiB") for h in diags[0].help), diags[0].help


def test_a_gpu_kv_pool_has_no_mirror(tmp_path: Path) -> None:
    loaded, diags = load_placement(gpu_placement(tmp_path, 0.5), program())
    assert loaded is not None, rendered(diags)
    assert {line.kind for line in estimate_memory(loaded, program()).ranks[0].lines} == \
        {"weights", "kv pool", "cuda graphs", "stream", "reserve"}


def test_undeclared_weights_count_as_zero_and_say_so() -> None:
    loaded, _ = load_placement(Path(__file__).parent.parent.parent / "placements" / "1xh100.toml", stand_in("bagel"))
    assert loaded is not None
    table = estimate_memory(loaded, stand_in("bagel"))
    combine = next(x for x in table.ranks[0].lines if x.owner == "combine" and x.kind == "weights")
    assert combine.bytes == 0 and "not declared" in combine.formula


def test_wildcard_dims_are_sized_with_an_underscore_key(tmp_path: Path) -> None:
    prog = program(stream="tensor[_, 64; f16]")
    extra = '[streams.s]\ndims = { "_" = 2 }'
    loaded, diags = load_placement(gpu_placement(tmp_path, 0.3, extra=extra), prog)
    assert loaded is not None, rendered(diags)
    line = next(x for x in estimate_memory(loaded, prog).ranks[0].lines if x.kind == "stream")
    assert line.formula == "64 items × 2 × 64 × 2 B × 16 requests"


def test_capacity_of_a_declared_stream(tmp_path: Path) -> None:
    prog = program()
    decl = next(d for d in prog.decls if isinstance(d, ast.Stream))
    loaded, _ = load_placement(gpu_placement(tmp_path, 0.3), prog)
    assert loaded is not None and capacity_of(loaded, decl) == 64
    loaded, _ = load_placement(gpu_placement(tmp_path, 0.3, extra="[streams.s]\ncapacity = 12"), prog)
    assert loaded is not None and capacity_of(loaded, decl) == 12
