"""Two placement readers compared on the same inputs: a git revision's wgc/placement against the
working tree's, on every shipped placement, every error example and many mutated placements.

Run by hand when the reader is rewritten (not collected by pytest: it reads an old revision):

    python -m tests.placement.equivalence --rev HEAD --mutants 40

For each input and each program (the stand-ins and models/*.walk) both readers load the file; the
diagnostics (code, message, span, help, notes) and the built placement (every field, spans
included) and its memory table must be equal. Warnings (W codes) the old reader did not have are left out of the
comparison, and so is `Placement.warnings`. Mutants are made from each file's lines: a line
dropped, doubled or moved, a value replaced by a value of another type or out of its bounds, a
key renamed; they are seeded, so a run can be repeated.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import random
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from types import ModuleType

from wgc.lang import ast
from wgc.lang.parser import parse

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "wgc/placement"
VALUES = ("0", "-1", "1", "2", "3", "7", "1.5", "0.5", "true", '"x"', '"0-1"', '"2-1"', '"0-99999"', "[0, 1]",
          "[]", "[1, 1]", '"64MiB"', '"1TiB"', '"99999TiB"', '"12"', "{}", "{ a = 1 }", "2**70", "1e400",
          "99999999999999999999999999999999999", '"cuda"', '"cpu"', '"H100"', '"nccl"', '"zmq"', '"mirror"',
          '"least_loaded"', '"127.0.0.5"', '"not-an-ip"', "1979-05-27", "[[1]]", '"a.b"', '"1x"')
KEYS = ("ranks", "tp", "zzz", "engine", "kv_memory", "max_batch", "routing", "device", "memory", "gpu",
        "capacity", "item_bytes", "page_size", "cuda_graph_buckets", "token_budget", "hosts", "model")


def is_toml(text: str) -> bool:
    """Whether tomllib accepts `text`: the only text the reader ever locates."""
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    return True


def old_package(rev: str, into: Path) -> ModuleType:
    """wgc/placement as it is at `rev`, importable as `old_placement`."""
    names = subprocess.run(["git", "ls-tree", "--name-only", f"{rev}:{PACKAGE}"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    pkg = into / "old_placement"
    pkg.mkdir()
    for name in names:
        if name.endswith(".py"):
            text = subprocess.run(["git", "show", f"{rev}:{PACKAGE}/{name}"], cwd=ROOT, check=True,
                                  capture_output=True, text=True).stdout
            (pkg / name).write_text(text.replace("wgc.placement", "old_placement"), encoding="utf-8")
    sys.path.insert(0, str(into))
    return importlib.import_module("old_placement")


def dump(value: object) -> object:
    """A value as plain data, every dataclass field included (spans too), `warnings` left out."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, tuple((f.name, dump(getattr(value, f.name)))
                                            for f in dataclasses.fields(value) if f.name != "warnings"))
    if isinstance(value, (tuple, list)):
        return tuple(dump(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, dump(v)) for k, v in value.items())
    return value


def outcome(reader: ModuleType, path: Path, program: ast.Program) -> object:
    placement, diags = reader.load_placement(path, program)
    shown = [d for d in diags if not d.code.startswith("W")]
    table = reader.estimate_memory(placement, program) if placement is not None else None
    return dump(placement), dump(shown), dump(table), table.render() if table else ""


def mutants(text: str, rng: random.Random, count: int) -> list[str]:
    lines = text.splitlines()
    out = []
    for _ in range(count):
        ls = list(lines)
        i = rng.randrange(len(ls)) if ls else 0
        kind = rng.randrange(6)
        if not ls:
            ls = ["x = 1"]
        elif kind == 0:
            del ls[i]
        elif kind == 1:
            ls.insert(i, ls[i])
        elif kind == 2:
            ls.insert(rng.randrange(len(ls) + 1), ls.pop(i))
        elif kind in (3, 4) and "=" in ls[i]:
            key, _ = ls[i].split("=", 1)
            ls[i] = f"{key}= {rng.choice(VALUES)}"
        elif kind == 5 and re.match(r"\s*[A-Za-z_]+\s*=", ls[i]):
            ls[i] = re.sub(r"[A-Za-z_]+", rng.choice(KEYS), ls[i], count=1)
        else:
            ls.insert(i, f"{rng.choice(KEYS)} = {rng.choice(VALUES)}")
        out.append("\n".join(ls) + "\n")
    return out


def programs() -> list[tuple[str, ast.Program]]:
    paths = sorted((ROOT / "tests/placement/programs").glob("*.walk")) + sorted((ROOT / "models").glob("*.walk"))
    out = []
    for p in paths:
        result = parse(p.read_text(encoding="utf-8"), str(p))
        if result.program is not None:
            out.append((str(p.relative_to(ROOT)), result.program))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", default="HEAD", help="the revision whose reader is the reference")
    parser.add_argument("--mutants", type=int, default=20, help="mutants per input file")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = old_package(args.rev, Path(tmp))
        new = importlib.import_module("wgc.placement")
        for module in ("locate", "facts"):
            importlib.import_module(f"old_placement.{module}")
            importlib.import_module(f"wgc.placement.{module}")
        copies = Path(tmp) / "inputs"  # mutants are written beside the copies, never into the tree
        shutil.copytree(ROOT / "placements", copies / "placements")
        shutil.copytree(ROOT / "tests/placement/errors", copies / "errors")
        inputs = sorted(copies.rglob("*.toml"))
        progs = programs()
        compared = differ = facts = 0
        for path in sorted(ROOT.glob("**/*.walk")):  # the program facts, on every program in the tree
            result = parse(path.read_text(encoding="utf-8"), str(path))
            if result.program is not None and ".git" not in path.parts:
                facts += 1
                if dump(old.facts.program_facts(result.program)) != dump(new.facts.program_facts(result.program)):
                    print(f"DIFFER facts {path}")
                    differ += 1
        rng = random.Random(args.seed)
        work = Path(tmp) / "mutants"
        for path in inputs:
            texts = [(path, None)]
            for k, text in enumerate(mutants(path.read_text(encoding="utf-8"), rng, args.mutants)):
                # beside the copy, so that a relative `extends` still finds its base
                texts.append((path.parent / f".mutant-{k}-{path.name}", text))
            for target, text in texts:
                try:
                    if text is not None:
                        target.write_text(text, encoding="utf-8")
                    source = target.read_text(encoding="utf-8")
                    if is_toml(source):  # only text tomllib accepts is ever located (document.py)
                        located = (dump(old.locate.locate(source, "f")), dump(new.locate.locate(source, "f")))
                        compared, differ = compared + 1, differ + (located[0] != located[1])
                        if located[0] != located[1]:
                            print(f"DIFFER locate {path.name}\n{source}")
                    for name, program in progs:
                        compared += 1
                        a, b = outcome(old, target, program), outcome(new, target, program)
                        if a != b:
                            differ += 1
                            if differ <= 5:
                                saved = work / f"differ-{differ}.toml"
                                saved.parent.mkdir(exist_ok=True)
                                print(f"DIFFER {path.name} ({'mutant' if text else 'original'}) with {name}")
                                print(f"  old: {a[1]!r:.600}\n  new: {b[1]!r:.600}")
                                if text:
                                    print(text)
                finally:
                    if text is not None:
                        target.unlink(missing_ok=True)
        print(f"| inputs | mutants each | programs | loads and locates compared | program facts compared | differ |\n"
              f"|---:|---:|---:|---:|---:|---:|\n| {len(inputs)} | {args.mutants} | {len(progs)} | {compared} | {facts} | {differ} |")
        return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
