"""The CPU decode mirror (runtime/engines/kv_mirror.py): twin engines, one with the mirror and one
gathering from the pages as before, driven through the same operations with the same keys, values
and queries. After every step the attention outputs are equal and every mirror row the next step
would keep equals its sequence's pages bit for bit: after prefill, steady decode, a prefix hit,
preemption and resume, a rollback, an aborted step, a fork, an import, a mixed step; and a steady
decode step gathers nothing."""

from __future__ import annotations

from pathlib import Path

import torch
from wgc.runtime.engines.attention import KVStep
from wgc.runtime.engines.kv_decode import SplitStep
from wgc.runtime.engines.kv_engine import Geometry, KVCacheEngine, Write
from wgc.runtime.engines.kv_mirror import DecodeMirror, MirrorStep
from wgc.runtime.engines.kv_pages import Appended, PageAllocator

from wgc.compile import compile_program

G = Geometry(layers=2, heads=4, kv_heads=2, head_dim=8, max_positions=256)
PS = 4


class Twins:
    """A mirrored engine and a gathering one, stepped alike."""

    def __init__(self, num_pages: int = 64, prefix_caching: bool = False) -> None:
        self.on = KVCacheEngine(G, num_pages, PS, torch.device("cpu"), prefix_caching=prefix_caching, mirror=True)
        self.off = KVCacheEngine(G, num_pages, PS, torch.device("cpu"), prefix_caching=prefix_caching, mirror=False)
        self.seed = 0

    @property
    def mirror(self) -> DecodeMirror:
        assert self.on.mirror is not None
        return self.on.mirror

    def step(self, writes: list[Write], fail: bool = False) -> type:
        """One step on both (random q/k/v, the same for both); the mirrored side's step type."""
        self.seed += 1
        kinds = []
        outs = []
        for e in (self.on, self.off):
            gen = torch.Generator().manual_seed(self.seed)
            prepared = e.prepare(writes)
            kv = e.step(prepared)
            kinds.append(type(kv.head) if isinstance(kv, SplitStep) else type(kv))
            n = sum(prepared.lengths)
            out = []
            for layer in range(G.layers):
                q = torch.randn(n, G.heads, G.head_dim, generator=gen)
                k = torch.randn(n, G.kv_heads, G.head_dim, generator=gen)
                v = torch.randn(n, G.kv_heads, G.head_dim, generator=gen)
                out.append(kv.attend(layer, q, k, v))
                if fail:  # the forward raised after its first layer: the step is undone
                    break
            if fail:
                e.abort(prepared)
            else:
                e.commit(prepared)
            outs.append(torch.stack(out))
        torch.testing.assert_close(outs[0], outs[1], rtol=1e-6, atol=1e-6)
        self.mirror.check(self.on.storage, self.on.pages)
        return kinds[0]

    def decode(self, keys: list[tuple[int, str]]) -> int:
        """A decode step of these rows; how many rows the mirror gathered from the pages."""
        before = self.mirror.events["mirror_rows_gathered"]
        assert self.step([Write(r, lab, [7], 1) for r, lab in keys]) is MirrorStep
        return self.mirror.events["mirror_rows_gathered"] - before

    def both(self, name: str, *args: object) -> None:
        getattr(self.on, name)(*args)
        getattr(self.off, name)(*args)


def prompt(twins: Twins, request: int, n: int, label: str = "a", start: int = 0) -> None:
    twins.step([Write(request, label, list(range(start, start + n)), n)])


def test_after_prefill_the_first_decode_gathers_each_row_once_and_then_none() -> None:
    t = Twins()
    for request, n in ((1, 5), (2, 8), (3, 1)):
        prompt(t, request, n)
    rows = [(1, "a"), (2, "a"), (3, "a")]
    assert t.decode(rows) == 3
    for _ in range(6):  # rows of unequal lengths (a mask) crossing page boundaries
        assert t.decode(rows) == 0
    assert t.mirror.lengths[:3] == [12, 15, 8]


def test_a_prefix_hit_shares_pages_written_by_another_request() -> None:
    t = Twins(prefix_caching=True)
    prompt(t, 1, 9)
    t.decode([(1, "a")])
    gathered = t.mirror.events["mirror_rows_gathered"]
    # two published pages attached: one token left to write, a decode-shaped step through the mirror,
    # which gathers the shared pages into row 0 (it held request 1: another sequence, another stamp)
    assert t.step([Write(2, "a", list(range(9)), 9)]) is MirrorStep
    assert t.on.events["prefix_hit_tokens"] == 8
    assert t.mirror.events["mirror_rows_gathered"] == gathered + 1
    assert t.decode([(2, "a"), (1, "a")]) == 1  # request 1 moved to row 1
    assert t.decode([(2, "a"), (1, "a")]) == 0
    t.both("release", 2)
    assert t.step([Write(3, "a", list(range(9)), 9)]) is MirrorStep  # request 3 takes row 0: a new stamp
    assert t.decode([(3, "a"), (1, "a")]) == 0


def test_preemption_and_resume_bring_the_rows_back_from_the_pages() -> None:
    t = Twins()
    for request in (1, 2, 3):
        prompt(t, request, 6, start=10 * request)
    t.decode([(1, "a"), (2, "a"), (3, "a")])
    t.both("preempt", 2)
    assert t.decode([(1, "a"), (3, "a")]) == 1  # request 3 moved to row 1
    assert t.step([Write(r, "a", [7], 1) for r in (1, 2, 3)]) is MirrorStep  # 2 swapped in by the general path
    assert t.decode([(1, "a"), (2, "a"), (3, "a")]) == 0


def test_a_rollback_and_an_aborted_step_are_not_trusted() -> None:
    t = Twins()
    prompt(t, 1, 6)
    prompt(t, 2, 3)
    t.decode([(1, "a"), (2, "a")])
    mark = t.on.checkpoint(1, "a"), t.off.checkpoint(1, "a")
    t.decode([(1, "a"), (2, "a")])
    t.decode([(1, "a"), (2, "a")])
    t.on.restore(1, "a", mark[0])  # a speculative step undone: cut back two tokens
    t.off.restore(1, "a", mark[1])
    prompt(t, 1, 2, start=50)  # other tokens written where the cut ones were, by the general path
    assert t.decode([(1, "a"), (2, "a")]) == 1
    t.step([Write(r, "a", [7], 1) for r in (1, 2)], fail=True)
    assert t.decode([(1, "a"), (2, "a")]) == 2  # the aborted step's rows came back by truncate


def test_a_fork_shares_its_source_and_copies_on_write() -> None:
    t = Twins()
    prompt(t, 1, 6)
    t.decode([(1, "a")])
    t.both("fork", 1, "b", "a")  # b shares a's partial last page
    assert t.decode([(1, "a"), (1, "b")]) == 1  # a kept (its copy-on-write changes no content), b new
    t.both("fork", 1, "a", "b")  # a replaced by a snapshot of b
    assert t.decode([(1, "a"), (1, "b")]) == 1


def test_an_imported_label_is_gathered_from_its_pages() -> None:
    t = Twins()
    prompt(t, 1, 5)
    prompt(t, 2, 7)
    t.decode([(1, "a"), (2, "a")])
    donor = KVCacheEngine(G, 16, PS, torch.device("cpu"), mirror=False)
    prepared = donor.prepare([Write(9, "a", list(range(6)), 6)])
    kv = donor.step(prepared)
    gen = torch.Generator().manual_seed(99)
    for layer in range(G.layers):
        kv.attend(layer, torch.randn(6, G.heads, G.head_dim, generator=gen),
                  torch.randn(6, G.kv_heads, G.head_dim, generator=gen),
                  torch.randn(6, G.kv_heads, G.head_dim, generator=gen))
    donor.commit(prepared)
    state = donor.export_label(9, "a")
    t.both("import_label", 2, "a", state)  # request 2's label replaced by another rank's
    assert t.decode([(1, "a"), (2, "a")]) == 1


def test_a_mixed_step_attends_its_decode_rows_through_the_mirror() -> None:
    t = Twins()
    prompt(t, 1, 5)
    t.decode([(1, "a")])
    kind = t.step([Write(1, "a", [7], 1), Write(2, "a", list(range(9)), 9)])  # decode beside a prompt
    assert kind is MirrorStep
    assert t.decode([(1, "a"), (2, "a")]) == 1


def test_past_its_budget_the_step_gathers_as_before() -> None:
    t = Twins(num_pages=10)  # the mirror may hold the pool's bytes again: 11 pages of 4 tokens
    for request in (1, 2):
        prompt(t, request, 12)
    t.decode([(1, "a"), (2, "a")])  # two rows of 16 tokens
    prompt(t, 3, 6)
    assert t.step([Write(r, "a", [7], 1) for r in (1, 2, 3)]) is KVStep  # three rows of 16 would outgrow it
    assert t.mirror.events["mirror_over_budget"] == 1


def test_every_change_of_a_sequence_changes_its_stamp() -> None:
    pages = PageAllocator(16, PS)
    seen = set()

    def stamp(label: str = "a") -> tuple[int, int]:
        value = pages.stamps([(1, label)])[0]
        assert value is not None and value not in seen
        seen.add(value)
        return value

    pages.append(1, "a", 5)
    first = stamp()
    pages.append_one_each([(1, "a")])
    assert pages.stamps([(1, "a")])[0] == (first[0], first[1] + 1)  # one edit: the decode append
    seen.add((first[0], first[1] + 1))
    pages.fork(1, "b", "a")
    stamp("b")
    out = pages.append(1, "a", 1)  # copy-on-write of the shared partial page
    assert isinstance(out, Appended) and out.copies
    stamp()
    pages.undo_copy(1, "a", *out.copies[0])
    stamp()
    pages.truncate(1, "a", 3)
    stamp()
    pages.free_label(1, "a")
    pages.append(1, "a", 3)
    stamp()
    pages.publish(1, "b", [b"x"])
    pages.attach(2, "a", pages.match([b"x"]))
    value = pages.stamps([(2, "a")])[0]
    assert value is not None and value not in seen
    assert pages.stamps([(3, "a")]) == [None]


def test_the_mirror_order_keeps_the_rows_it_holds_and_moves_one_into_a_gap() -> None:
    t = Twins()
    for request in range(1, 6):
        prompt(t, request, 3 + request)
    rows = [(r, "a") for r in range(1, 6)]
    assert t.decode(rows) == 5
    assert t.on.mirror_order(rows) is None  # already the mirror's order
    t.both("release", 2)
    left = [(1, "a"), (3, "a"), (4, "a"), (5, "a")]
    order = t.on.mirror_order(left)
    assert order == [0, 3, 1, 2]  # request 5 (row 4) moves into row 1; 3 and 4 stay at rows 2 and 3
    assert t.decode([left[i] for i in order]) == 1
    prompt(t, 6, 4)
    arrived = [(1, "a"), (3, "a"), (4, "a"), (5, "a"), (6, "a")]
    order = t.on.mirror_order(arrived)
    assert order == [0, 3, 1, 2, 4]  # the newcomer takes the row past the others
    assert t.decode([arrived[i] for i in order]) == 1
    assert t.off.mirror_order(arrived) is None  # no mirror: any order


def test_the_mirror_stays_within_the_memory_tables_kv_mirror_line() -> None:
    """The compiler counts a CPU kv pool's mirror at the pool's bytes (wgc/placement/memory.py); the
    engine built from the same plan's settings bounds its mirror by no more than that."""
    root = Path(__file__).resolve().parents[2]
    source = root / "models" / "llama.walk"
    plan = compile_program(str(source), source.read_text(), str(root / "placements" / "cpu.toml")).plan
    assert plan is not None
    (lm,) = [c for c in plan.components if c.engine == "kv"]
    counted = plan.memory[0].mirror_bytes
    assert counted == plan.memory[0].kv_bytes == lm.settings["kv_memory"] > 0
    engine = KVCacheEngine.for_spec(lm.settings, G, torch.device("cpu"))
    page = 2 * G.layers * engine.page_size * G.kv_heads * G.head_dim * 4
    assert counted - page < engine.mirror.max_bytes <= counted  # the pool's own pages, not its scratch page
