"""The markdown tables of bench/peer_vllm.py, each goal marked met or not, and the PNG plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.plotting import pyplot

ENGINE_GOAL, SERVING_GOAL, ORPHEUS_GOAL = 1.2, 1.2, 1.5


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f}"


def _mark(ok: bool) -> str:
    return "met" if ok else "not met"


def _paired(row: dict[str, Any]) -> str:
    """Each round's ratio of the two sides run back to back: on a host whose speed drifts, the best
    round of each side may come from different moments, and these show how far the verdict holds."""
    return ", ".join(f"{x:.2f}" for x in row.get("paired", ()))


def engine_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | batch | wgc runtime (tok/s) | vLLM `LLM.generate` (tok/s) | wgc / vLLM | "
             f"each round's wgc / vLLM | same greedy tokens | goal >= {ENGINE_GOAL}x |",
             "|---|---:|---:|---:|---:|---|---|---|"]
    for r in rows:
        ratio = r["wgc"] / r["vllm"]
        lines.append(f"| {r['model']} | {r['batch']} | {r['wgc']:,.0f} | {r['vllm']:,.0f} | {ratio:.2f} | "
                     f"{_paired(r)} | {'yes' if r['same'] else 'NO'} | {_mark(ratio >= ENGINE_GOAL)} |")
    return "\n".join(lines)


def serving_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | streams | server | req/s | tok/s | TTFT p50 (ms) | TTFT p99 (ms) | ITL p50 (ms) | "
             "ITL p99 (ms) | wgc / vLLM req/s | each round's wgc / vLLM | goal (>= 1.2x, TTFT p99 no worse) | "
             "same greedy reply |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for r in rows:
        a, b = r["wgc"], r["vllm"]
        ratio = a["req_s"] / b["req_s"]
        ok = ratio >= SERVING_GOAL and a["ttft_p99"] <= b["ttft_p99"]
        same = "yes" if r["same"] else "NO"
        wgc_tail = f"{ratio:.2f} | {_paired(r)} | {_mark(ok)} | {same}"
        for label, m, tail in (("wgc", a, wgc_tail), ("vLLM", b, " |  |  | ")):
            lines.append(f"| {r['model']} | {r['concurrency']} | {label} | {m['req_s']:.2f} | {m['tok_s']:,.0f} | "
                         f"{_ms(m['ttft_p50'])} | {_ms(m['ttft_p99'])} | {_ms(m['itl_p50'])} | {_ms(m['itl_p99'])} | "
                         f"{tail} |")
    return "\n".join(lines)


def orpheus_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| concurrent | wgc audio-s / wall-s | peer (vLLM + SNAC) audio-s / wall-s | wgc / peer | "
             "each round's wgc / peer | wgc TTFA p50 / p99 (ms) | peer TTFA p50 / p99 (ms) | "
             "goal (>= 1.5x, TTFA no worse) |",
             "|---:|---:|---:|---:|---|---:|---:|---|"]
    for r in rows:
        a, b = r["wgc"], r["peer"]
        ratio = a["audio_per_wall"] / b["audio_per_wall"]
        ok = ratio >= ORPHEUS_GOAL and a["ttft_p99"] <= b["ttft_p99"]
        lines.append(f"| {r['concurrency']} | {a['audio_per_wall']:.2f} | {b['audio_per_wall']:.2f} | {ratio:.2f} | "
                     f"{_paired(r)} | {_ms(a['ttft_p50'])} / {_ms(a['ttft_p99'])} | "
                     f"{_ms(b['ttft_p50'])} / {_ms(b['ttft_p99'])} | "
                     f"{_mark(ok)} |")
    return "\n".join(lines)


def plot(results: dict[str, list[dict[str, Any]]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    panels = [k for k in ("engine", "serving", "orpheus") if results.get(k)]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, key in zip(axes[0], panels):
        rows = results[key]
        if key == "engine":
            labels = [f"{r['model']} b{r['batch']}" for r in rows]
            ratios = [r["wgc"] / r["vllm"] for r in rows]
            goal = ENGINE_GOAL
        elif key == "serving":
            labels = [f"{r['model']} c{r['concurrency']}" for r in rows]
            ratios = [r["wgc"]["req_s"] / r["vllm"]["req_s"] for r in rows]
            goal = SERVING_GOAL
        else:
            labels = [f"c{r['concurrency']}" for r in rows]
            ratios = [r["wgc"]["audio_per_wall"] / r["peer"]["audio_per_wall"] for r in rows]
            goal = ORPHEUS_GOAL
        ax.bar(labels, ratios, color="tab:blue")
        ax.axhline(1.0, color="grey", lw=1)
        ax.axhline(goal, color="tab:green", ls="--", lw=1, label=f"goal {goal}x")
        ax.set_title(f"{key}: wgc / peer")
        ax.tick_params(axis="x", rotation=45)
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def write(results: dict[str, list[dict[str, Any]]], heading: str, out: Path) -> None:
    """Each table run to a file of its own with its plot (peer_vllm-<table>.md / .png), so a run of one
    table (`--only orpheus`) leaves the others' last results in place; peer_vllm.md gathers the latest
    of every table, each under the heading (commit, vLLM version) of the run that measured it."""
    tables = {"engine": engine_table, "serving": serving_table, "orpheus": orpheus_table}
    out.mkdir(parents=True, exist_ok=True)
    for key, table in tables.items():
        if results.get(key):
            section = f"### {key}\n\n{heading}\n\n{table(results[key])}\n"
            print(section, flush=True)
            (out / f"peer_vllm-{key}.md").write_text(section, encoding="utf-8")
            plot({key: results[key]}, out / f"peer_vllm-{key}.png")
    sections = [out / f"peer_vllm-{key}.md" for key in tables]
    (out / "peer_vllm.md").write_text("\n".join(p.read_text(encoding="utf-8") for p in sections if p.exists()),
                                      encoding="utf-8")
