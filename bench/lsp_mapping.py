"""How long `wgc lsp` takes to map positions from the last text that parsed onto the current one
(wgc/lsp/mapping.py), against difflib's SequenceMatcher over lines as the baseline, in one process.

Texts: a 2,000-line program (bagel.walk repeated) with one deleted brace, 10 inserted lines plus
the brace, and 200 scattered one-character edits; and an adversarial pair (2,000 repeated lines
against an alternation), where SequenceMatcher without autojunk is quadratic. Matched: the share of
the old text found unchanged (SequenceMatcher with autojunk, its default, leaves repeated lines such
as `}` unmatched). Prints a markdown table; writes bench/out/lsp_mapping.png.

    python bench/lsp_mapping.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from difflib import SequenceMatcher
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wgc.lsp.mapping import TextMap  # noqa: E402

OUT = ROOT / "bench" / "out"


def cases() -> dict[str, tuple[str, str]]:
    bagel = (ROOT / "models" / "bagel.walk").read_text()
    long = "".join(bagel.replace("bagel", f"bagel{k}") for k in range(15))
    last_brace = long.rindex("}")
    one = long[:last_brace] + long[last_brace + 1:]
    ten = "\n".join(f"# note {k}" for k in range(10)) + "\n" + one
    rows = long.split("\n")
    for k in range(0, len(rows), 10):
        rows[k] = rows[k][: len(rows[k]) // 2] + "{" + rows[k][len(rows[k]) // 2:]
    return {"one brace deleted": (long, one), "10 lines + brace": (long, ten),
            "200 scattered edits": (long, "\n".join(rows)), "adversarial (600 lines)": ("a\n" * 600, "a\nb\n" * 300)}


def matched_share(old: str, blocks: list[tuple[int, int, int]]) -> float:
    return sum(n for _, _, n in blocks) / max(len(old), 1)


def line_blocks(old: str, new: str) -> list[tuple[int, int, int]]:
    """SequenceMatcher over lines (its defaults), its blocks turned into character ranges."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    starts_a = [0]
    for line in a:
        starts_a.append(starts_a[-1] + len(line))
    starts_b = [0]
    for line in b:
        starts_b.append(starts_b[-1] + len(line))
    out = []
    for i, j, n in SequenceMatcher(None, a, b).get_matching_blocks():
        if n:
            out.append((starts_a[i], starts_b[j], starts_a[i + n] - starts_a[i]))
    return out


def timed(fn, runs: int) -> tuple[float, object]:
    result = fn()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for name, (old, new) in cases().items():
        ours, mapped = timed(lambda old=old, new=new: TextMap(old, new), args.runs)
        base, blocks = timed(lambda old=old, new=new: line_blocks(old, new), args.runs)
        rows.append((name, old.count("\n"), ours, matched_share(old, mapped.blocks), base, matched_share(old, blocks)))
    print("| text | lines | wgc ms | wgc matched | SequenceMatcher ms | SequenceMatcher matched | time ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, lines, ours, ours_share, base, base_share in rows:
        print(f"| {name} | {lines:,} | {ours * 1000:.1f} | {ours_share:.0%} | {base * 1000:.1f} | {base_share:.0%} | "
              f"{base / ours:.2f}x |")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    fig, ax = plt.subplots(figsize=(8, 3.5))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r[2] * 1000 for r in rows], width=0.4, label="wgc mapping")
    ax.bar([x + 0.2 for x in xs], [r[4] * 1000 for r in rows], width=0.4, label="SequenceMatcher over lines")
    ax.set_xticks(list(xs), [r[0] for r in rows], fontsize=8)
    ax.set_ylabel("ms (median)")
    ax.legend(fontsize=8)
    ax.set_title("wgc lsp: mapping the last good analysis onto the current text")
    fig.tight_layout()
    OUT.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT / "lsp_mapping.png", dpi=110)
    print(f"\nplot: {OUT / 'lsp_mapping.png'}")


if __name__ == "__main__":
    main()
