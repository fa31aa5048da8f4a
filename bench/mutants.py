"""A handful of targeted mutants of the runtime's core guards, and whether the tests notice each.

A test that still passes with the guard it names taken out cannot catch a regression of it. This
script copies the tree (git's tracked files and the untracked ones it does not ignore, as they are
in the working tree) to a temporary folder, and for each mutant: applies one text substitution to
that copy, runs the test files that concern the guard against it, and reports the mutant as killed
(some test failed) or SURVIVED (every test passed: the guard is not tested). The working tree itself
is never written. Not run in CI: each mutant runs a few test files (minutes in all).

    python bench/mutants.py [--only NAME ...] [--list] [--timeout 300]

Python is pointed at the copy by a sitecustomize module on PYTHONPATH, which maps the packages of
pyproject.toml's [tool.setuptools] package-dir onto it (the editable install maps them onto the
working tree); test subprocesses inherit PYTHONPATH. Before the mutants, the copy runs every test
file unmutated: a file that fails there is reported and its mutants are not judged.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    guard: str  # which of the core guards it takes out
    path: str  # file in the tree
    old: str  # text that must occur exactly once in the file
    new: str
    tests: tuple[str, ...]  # test files (or node ids) that should fail


MUTANTS = (
    Mutant("running-stop-never-cancels", "cancellation", "runtime/http/admission/running.py",
           "if self.handle.final is None and self._cancel is None:", "if False:",
           ("tests/http/test_disconnect.py", "tests/http/test_limits.py")),
    Mutant("coordinator-cancel-tells-no-rank", "cancellation", "runtime/coordinator/core.py",
           "            self.send(rank, Cancel(request, reason))", "            pass",
           ("tests/http/test_disconnect.py", "tests/runtime/test_api.py")),
    Mutant("whole-answer-ignores-disconnect", "disconnect", "runtime/http/serving/streaming.py",
           "await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)", "await asyncio.wait({task})",
           ("tests/http/test_disconnect.py",)),
    Mutant("stream-end-keeps-the-lease", "disconnect", "runtime/http/serving/streaming.py",
           "        finally:\n            lease.release()", "        finally:\n            pass",
           ("tests/http/test_disconnect.py",)),
    Mutant("speculation-keeps-the-wasted-kv", "rollback", "runtime/worker/interpret.py",
           "            self.ex.components[component].restore(inst.request, label, cp)", "            pass",
           ("tests/runtime/test_semantics.py", "tests/runtime/test_pop_speculation.py",
            "tests/runtime/test_split_stop.py")),
    Mutant("speculation-keeps-the-wasted-frame", "rollback", "runtime/worker/interpret.py",
           "            else:\n                inst.frame[name] = value", "            else:\n                pass",
           ("tests/runtime/test_semantics.py", "tests/runtime/test_pop_speculation.py",
            "tests/runtime/test_split_stop.py", "tests/runtime/test_rollback.py")),
    Mutant("admission-ignores-max-running", "admission", "runtime/http/admission/slots.py",
           "if not self._waiting and self.running + weight <= self.capacity.max_running:", "if True:",
           ("tests/http/test_capacity.py", "tests/http/test_parts.py", "tests/runtime/test_api.py")),
    Mutant("admission-ignores-max-queued", "admission", "runtime/http/admission/slots.py",
           "if len(self._waiting) >= self.capacity.max_queued:", "if False:",
           ("tests/http/test_capacity.py", "tests/http/test_parts.py")),
    Mutant("push-ignores-stream-capacity", "stream credits", "runtime/worker/interpret.py",
           "if spec.capacity > 0 and end.in_flight >= spec.capacity:", "if False:",
           ("tests/runtime/test_stream_properties.py", "tests/runtime/test_semantics.py",
            "tests/runtime/test_request_state.py")),
    Mutant("pop-returns-no-credit", "stream credits", "runtime/worker/interpret.py",
           "        inst.frame[ins.output] = got.value\n        self._credit(inst.request, spec.name, end, before)",
           "        inst.frame[ins.output] = got.value",
           ("tests/runtime/test_stream_properties.py", "tests/runtime/test_semantics.py",
            "tests/runtime/test_stream_credit.py")),
    Mutant("held-items-never-complete-a-chunk", "stream credits", "runtime/worker/interpret.py",
           "item, policy.ends_chunk(end.pushed))", "item, False)",
           ("tests/runtime/test_held_items.py", "tests/runtime/test_semantics.py")),
    Mutant("held-items-overtaken-by-other-messages", "stream credits", "runtime/worker/held_items.py",
           "        if self.held:\n            self.release()\n        self._send(destination, msg)",
           "        self._send(destination, msg)",
           ("tests/runtime/test_held_items.py", "tests/runtime/test_semantics.py")),
    Mutant("dropped-request-keeps-held-items", "cancellation", "runtime/worker/executor.py",
           "        self.held.drop(request)\n", "",
           ("tests/runtime/test_held_items.py", "tests/runtime/test_semantics.py")),
    Mutant("round-budget-ignores-prefill-budget", "admission", "runtime/worker/batching.py",
           "        return max(budget, int(settings.get(\"prefill_token_budget\") or 0))", "        return budget",
           ("tests/runtime/test_round_budget.py", "tests/placement/test_prefill_budget.py")),
)

_SITE = '''"""Written by bench/mutants.py: the wgc packages come from this copy of the tree."""
import importlib.abc
import importlib.util
import sys

_MAP = {map!r}


class _Copy(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        where = _MAP.get(fullname)
        if where is None:
            return None
        return importlib.util.spec_from_file_location(fullname, where + "/__init__.py",
                                                      submodule_search_locations=[where])


sys.meta_path.insert(0, _Copy())
'''


def tree_files(root: Path) -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.decode()
    return [p for p in listed.split("\0") if p and (root / p).is_file()]


def copy_tree(root: Path, dest: Path) -> None:
    for rel in tree_files(root):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    dirs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    site = dest / "_mutants_site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITE.format(map={k: str(dest / v) for k, v in dirs.items()}))


def run_tests(copy: Path, tests: tuple[str, ...], timeout: float) -> tuple[bool, str]:
    """(passed, the last line pytest printed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy / "_mutants_site"), str(copy)])}
    env.pop("PYTEST_ADDOPTS", None)
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                              cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:.0f} s (counted as killed: the suite hung)"
    lines = [ln for ln in done.stdout.strip().splitlines() if ln.strip()]
    return done.returncode == 0, lines[-1] if lines else f"exit {done.returncode}"


def apply(copy: Path, mutant: Mutant) -> str:
    """The file's original text, after writing the mutant into the copy."""
    path = copy / mutant.path
    text = path.read_text(encoding="utf-8")
    found = text.count(mutant.old)
    if found != 1:
        raise LookupError(f"{mutant.path}: the mutated text occurs {found} times (the code moved on: update it)")
    path.write_text(text.replace(mutant.old, mutant.new), encoding="utf-8")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="names of the mutants to run")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for one pytest run")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if args.only is None or m.name in args.only]
    if args.list or not chosen:
        for m in MUTANTS:
            print(f"{m.name:40s} {m.guard:15s} {m.path}")
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="wgc-mutants-") as tmp:
        copy = Path(tmp)
        copy_tree(ROOT, copy)
        files = sorted({t for m in chosen for t in m.tests})
        baseline = {t: run_tests(copy, (t,), args.timeout) for t in files}
        for m in chosen:
            broken = [t for t in m.tests if not baseline[t][0]]
            if broken:
                rows.append((m, "not judged", f"fails unmutated: {', '.join(broken)}", 0.0))
                continue
            start = time.monotonic()
            try:
                original = apply(copy, m)
            except LookupError as err:
                rows.append((m, "stale", str(err), 0.0))
                continue
            try:
                passed, last = run_tests(copy, m.tests, args.timeout)
            finally:
                (copy / m.path).write_text(original, encoding="utf-8")
            rows.append((m, "SURVIVED" if passed else "killed", last, time.monotonic() - start))
    print("| mutant | guard | file | tests | result | pytest's last line | s |")
    print("|---|---|---|---|---|---|---:|")
    for m, result, last, seconds in rows:
        tests = ", ".join(Path(t).name for t in m.tests)
        print(f"| {m.name} | {m.guard} | {m.path} | {tests} | {result} | {last.replace('|', '/')} | {seconds:.0f} |")
    survived = [m.name for m, result, _, _ in rows if result == "SURVIVED"]
    print(f"\n{len(rows)} mutants: {sum(r[1] == 'killed' for r in rows)} killed, {len(survived)} survived"
          + (f" ({', '.join(survived)})" if survived else ""))
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
