"""The worker process: `python -P -m wgc.runtime.process.worker_main --plan PATH --rank N ...`.

`-P`: the working directory is not on the import path. Before any component is imported, every
class this rank builds is checked against the allowed module prefixes (`--allow-module-prefix`,
repeatable; by default wgc.models and the placement's `[serve] allow_modules`: modules.py).

Started by the supervisor with plain string arguments (no pickled objects),
its standard input a pipe from the parent: when the parent dies, for whatever
reason, the pipe reaches end of file and the worker exits, so no worker
outlives its runtime. SIGINT is ignored (the terminal sends it to the whole
process group; the parent shuts the workers down in order); SIGTERM and
SIGKILL end the worker at once.

Start-up lines (each component loaded, each CUDA graph captured; runtime/worker/startup.py) go to
this process's stderr, which is the runtime's own, and to the coordinator.

Exit status: 0 after Shutdown or the parent's end, 3 when the rank cannot
start (plan, components, sockets), 1 on an internal error. The reason is also
written as one line to `--error-file`, for the supervisor to report.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import traceback

from wgc.runtime.process.endpoints import Endpoints

EXIT_START = 3
EXIT_INTERNAL = 1


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="wgc-worker", description="One rank of a wgc runtime.")
    p.add_argument("--plan", required=True, help="plan file")
    p.add_argument("--rank", required=True, type=int)
    p.add_argument("--coordinator", required=True, help="the coordinator's endpoint")
    p.add_argument("--endpoints", required=True, help="every rank's endpoint, comma-separated, in rank order")
    p.add_argument("--bind", default="", help="what this rank binds, comma-separated (default: its own endpoint)")
    p.add_argument("--error-file", required=True, help="where to write the reason this worker stopped")
    p.add_argument("--fake", action="store_true", help="fake components (no weights)")
    p.add_argument("--allow-module-prefix", action="append", dest="allow_modules", metavar="PREFIX",
                   help="import component classes only from modules under PREFIX (repeatable)")
    return p.parse_args(argv)


def _report(path: str, line: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(" ".join(line.split()) + "\n")
    except OSError:
        pass


def _log_to_stderr() -> None:
    """wgc's INFO lines (start-up progress, what a component loaded) on stderr, one per line."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("wgc")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _log_to_stderr()
    from wgc.runtime.process.modules import ModuleRefused, allowed_prefixes, check_components
    from wgc.runtime.process.worker import Worker

    from wgc.plan.file import PlanFileError, load_plan

    ranks = tuple(args.endpoints.split(","))
    binds = tuple(tuple(args.bind.split(",")) if r == args.rank else () for r in range(len(ranks))) if args.bind else ()
    endpoints = Endpoints(args.coordinator, ranks, (), binds)
    try:
        _, plan = load_plan(args.plan)
        if not args.fake:
            check_components(plan, allowed_prefixes(plan, args.allow_modules), args.rank)
        worker = Worker(plan, args.rank, endpoints, args.fake, sys.stdin.fileno())
    except Exception as err:  # noqa: BLE001 - any start-up failure becomes one line for the supervisor
        _report(args.error_file, str(err) if isinstance(err, (ImportError, OSError, PlanFileError, ModuleRefused)) else
                f"{type(err).__name__}: {err}")
        return EXIT_START
    try:
        worker.serve()
    except Exception as err:  # noqa: BLE001 - reported, with the traceback on stderr
        traceback.print_exc()
        _report(args.error_file, f"internal error: {type(err).__name__}: {err}")
        return EXIT_INTERNAL
    finally:
        worker.close()
    return 0


def _exit(code: int) -> None:
    """Exit without running interpreter teardown once torch.distributed groups exist: a Gloo pair torn
    down at interpreter exit after its peer has gone may abort the process (a spurious SIGABRT)."""
    if "torch.distributed" in sys.modules:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    _exit(main())
