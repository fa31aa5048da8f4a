"""Runtime dispatch overhead per RUN, with no-op components, in one process (no sockets).

Rows:
- wgc at 1 and at 64 concurrent requests: a walk looping over a no-op entry; time per RUN
  (and per request per RUN), side by side with a plain Python loop calling the same no-op
  component the same number of times (the baseline), and their ratio;
- a chain of 10 walks (one no-op each) against one walk of 10 no-op nodes, per request.
Goals: <= 20 us per RUN at batch 1; <= 2 us per request per RUN at 64 concurrent.
Prints a markdown table; writes bench/out/runtime_overhead.png.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wgc.runtime.components.base import Call, Component  # noqa: E402
from wgc.runtime.coordinator.request import RequestSpec  # noqa: E402
from wgc.runtime.process.local import LocalCluster  # noqa: E402

from bench.plotting import pyplot  # noqa: E402
from tests.runtime.cluster import compile_text, cpu_placement  # noqa: E402
from wgc.plan.model import ComponentSpec  # noqa: E402


class Noop(Component):
    def f(self, calls: list[Call]) -> list[Any]:
        return [c.args[0] for c in calls]


LOOP = """
model noop
import bench.runtime_overhead as b
param n: int = 1000 in 1..100000
component c: b.Noop engine stateless {
    f(x: scalar) -> scalar
}
walk w() {
    loop n carry x = 0 nospec {
        x = c.f(x)
    } yield terminal x
    emit tensor x
}
flow { start -> w -> done }
"""


def chain_program(walks: int) -> str:
    head = "model chain\nimport bench.runtime_overhead as b\ncomponent c: b.Noop engine stateless {\n    f(x: scalar) -> scalar\n}\n"
    body = "".join(f"walk w{i}(x: scalar) -> scalar {{\n    y = c.f(x)\n    return y\n}}\n" for i in range(walks))
    flow = "flow { start -> " + " -> ".join(f"w{i}" for i in range(walks)) + " -> done }\n"
    return head + body + flow


def wide_program(nodes: int) -> str:
    head = "model wide\nimport bench.runtime_overhead as b\ncomponent c: b.Noop engine stateless {\n    f(x: scalar) -> scalar\n}\n"
    steps = "".join(f"    x{i + 1} = c.f(x{i})\n" for i in range(nodes))
    return head + f"walk w(x0: scalar) {{\n{steps}    emit tensor x{nodes}\n}}\nflow {{ start -> w -> done }}\n"


def factory(spec: ComponentSpec, rank: int) -> Component:
    return Noop(spec, rank, "cpu")


def time_cluster(plan, specs: list[RequestSpec], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        cluster = LocalCluster(plan, factory, fake_inputs=True, encode=False)
        t = time.perf_counter()
        cluster.run(specs)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def time_baseline(calls: int, batch: int, repeats: int = 5) -> float:
    comp = Noop(ComponentSpec("c", "x.Noop", "stateless", [], {}, [], {}, [0], 1, {}), 0, "cpu")
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        x = [0] * batch
        for _ in range(calls):
            x = comp.call("f", [Call(r, "", (x[r],)) for r in range(batch)])
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> list[tuple[str, float, float]]:
    tmp = Path(tempfile.mkdtemp())
    rows = []
    loop_plan = compile_text(tmp, LOOP, cpu_placement(1))
    n = 2000
    for concurrent in (1, 64):
        specs = [RequestSpec(params={"n": n}) for _ in range(concurrent)]
        wgc = time_cluster(loop_plan, specs) / (n * concurrent) * 1e6
        base = time_baseline(n, concurrent) / (n * concurrent) * 1e6
        rows.append((f"loop of RUNs, {concurrent} concurrent (us per request per RUN)", wgc, base))
    chain = compile_text(tmp, chain_program(10), cpu_placement(1))
    wide = compile_text(tmp, wide_program(10), cpu_placement(1))
    rows.append(("10 walks chained vs 1 walk of 10 nodes (us per request)",
                 time_cluster(chain, [RequestSpec(inputs={"x": 1}) for _ in range(50)]) / 50 * 1e6,
                 time_cluster(wide, [RequestSpec(inputs={"x0": 1}) for _ in range(50)]) / 50 * 1e6))
    print("| case | wgc | baseline | ratio |")
    print("|---|---:|---:|---:|")
    for name, wgc, base in rows:
        print(f"| {name} | {wgc:.2f} | {base:.2f} | {wgc / base:.1f}x |")
    print("\nbaselines: a plain Python loop calling the same no-op component (rows 1-2); "
          "the single 10-node walk (row 3)")
    _plot(rows)
    return rows


def _plot(rows: list[tuple[str, float, float]]) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(9, 4))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r[1] for r in rows], width=0.4, label="wgc runtime")
    ax.bar([x + 0.2 for x in xs], [r[2] for r in rows], width=0.4, label="baseline")
    ax.set_xticks(list(xs), ["1 request", "64 requests", "chain vs wide"])
    ax.set_ylabel("microseconds")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "runtime_overhead.png", dpi=120)
    print(f"plot: {out / 'runtime_overhead.png'}")


if __name__ == "__main__":
    main()
