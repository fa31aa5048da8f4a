"""Which component modules may be imported, checked against the plan before anything is imported.

A plan names each component's class (`wgc.models.orpheus.LanguageModel`); a worker imports that
class's module to build the component, and the HTTP frontend imports it for the model's hooks
(tokenizer, sample rate). Every class the plan's component table names must lie under an allowed
module prefix, or nothing starts:

- `--allow-module-prefix P` (repeatable; `allow_modules=` in `Runtime.start`): exactly these;
- otherwise `wgc.models` plus the placement's `[serve] allow_modules` (carried in the plan as the
  setting `serve.allow_modules`).

A prefix covers a module and everything under it, dot by dot: `wgc.models` allows
`wgc.models.orpheus`, not `wgc.modelsx`. Fake components import nothing, so `--fake` skips the check.

Workers also start with an import path that excludes the working directory (`python -P`, and a
PYTHONPATH without empty or relative entries, which stand for the working directory): a `msgspec.py`
in the directory `wgc run` was started from is never imported (`worker_command`, `worker_env`).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence

from wgc.runtime.process.errors import StartError

from wgc.plan.model import Plan

DEFAULT_PREFIXES: tuple[str, ...] = ("wgc.models",)
SETTING = "serve.allow_modules"  # the placement's [serve] allow_modules, comma-separated
WORKER_MODULE = "wgc.runtime.process.worker_main"

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


class ModuleRefused(StartError):
    """A component class outside the allowed module prefixes (or not a class path at all)."""


def is_module_prefix(text: str) -> bool:
    """`pkg` or `pkg.sub`: dotted Python identifiers."""
    return _DOTTED.fullmatch(text) is not None


def under(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def allowed_prefixes(plan: Plan, given: Sequence[str] | None = None) -> tuple[str, ...]:
    """`given` when there is one (the command line's), else wgc.models and what the placement lists."""
    if given is not None:
        return tuple(given)
    listed = next((str(s.value) for s in plan.settings if s.key == SETTING), "")
    return DEFAULT_PREFIXES + tuple(p for p in listed.split(",") if p and p not in DEFAULT_PREFIXES)


def _shown(text: str) -> str:
    return text if _DOTTED.fullmatch(text) else repr(text[:80])


def check_components(plan: Plan, prefixes: Sequence[str], rank: int | None = None) -> None:
    """ModuleRefused (one line) for the first component (on `rank`, or on any) whose class lies
    outside `prefixes`; imports nothing."""
    for spec in plan.components:
        if rank is not None and rank not in spec.ranks:
            continue
        module = spec.cls.rpartition(".")[0]
        if not (_DOTTED.fullmatch(spec.cls) and module):
            raise ModuleRefused(f"component {_shown(spec.name)}: class {_shown(spec.cls)} is not a module path "
                                "and a class name (such as wgc.models.orpheus.LanguageModel); nothing was imported")
        if not under(module, prefixes):
            shown = ", ".join(prefixes) or "none"
            raise ModuleRefused(
                f"component {_shown(spec.name)}: class {spec.cls} is in module {module}, outside the allowed "
                f"module prefixes ({shown}); nothing was imported. To run it, allow its package with "
                f"--allow-module-prefix {module.partition('.')[0]} or [serve] allow_modules in the placement")


def worker_command(args: Sequence[str]) -> list[str]:
    """`python -P -m wgc.runtime.process.worker_main ARGS`: -P keeps the working directory off sys.path."""
    return [sys.executable, "-P", "-m", WORKER_MODULE, *args]


def worker_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The workers' environment: PYTHONPATH without the entries that name the working directory
    (empty ones, and relative ones, which Python resolves against it), and no WGC_API_KEY (the
    frontend's secret: a worker has no use for it)."""
    env = {k: v for k, v in environ.items() if k != "WGC_API_KEY"}
    path = env.get("PYTHONPATH")
    if path is not None:
        kept = [p for p in path.split(os.pathsep) if p and os.path.isabs(p)]
        if kept:
            env["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            del env["PYTHONPATH"]
    return env
