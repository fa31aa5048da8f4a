"""`wgc run`: serve a plan with a coordinator and one worker process per rank, run requests, print NDJSON.

    wgc run bagel.plan --fake --request '{"params": {"steps": 8}, "parts": [{"kind": "text", "payload": "a cat"}],
                                          "outputs": ["image"]}'
    producer | wgc run bagel.plan --fake --request -          # one JSON request per line on stdin
    wgc run orpheus.plan --request '{"inputs": {"prompt": "Hi"}}' -o out/   # out/audio.wav (run_files.py)
    wgc run bagel.plan --serve :8000 --api-key-file key.txt   # HTTP (OpenAI-compatible), docs/http.md

With --serve, the only line on stdout is {"event": "ready", "url": ..., ...}, written once every rank
has loaded (port 0 picks a free port: the line has the real one); the server runs until SIGINT or
SIGTERM.

Every line on stdout is one JSON object: first {"event": "ready", ...} with each rank's pid, then the
requests' events as they happen ("output", then one of "done", "error", "cancelled"), each naming its
request. Exit status: 0 when every request is done, 1 when one failed (or the runtime could not start
or the plan is bad), 2 for bad usage or a missing file, 128 + the signal after SIGINT or SIGTERM, which
stop every worker first.

With -o DIR the outputs are written as files instead (WAV, PNG, .txt, .npy: run_files.py) and stdout
has one line per file; a request's error goes to stderr.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from wgc.cli.sources import EXIT_USAGE

if TYPE_CHECKING:  # asyncio is imported where it runs: `wgc check` imports this module too
    import asyncio

REQUEST_KEYS = ("params", "task", "parts", "inputs", "outputs", "input_modalities", "think")


class OutputGone(Exception):
    """Standard output cannot be written any more (a closed pipe, a full disk)."""


def _write_line(text: str) -> None:
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except OSError as err:
        raise OutputGone(err.strerror or str(err)) from None


def _json_line(obj: dict[str, Any]) -> None:
    import msgspec

    def default(value: Any) -> Any:
        if hasattr(value, "tolist"):
            return value.tolist()  # tensors and arrays: their values
        if isinstance(value, (set, frozenset)):
            return sorted(value, key=repr)
        raise TypeError(f"cannot write a {type(value).__name__} as JSON")

    _write_line(msgspec.json.encode(obj, enc_hook=default).decode())


def parse_request(text: str, where: str) -> dict[str, Any]:
    """One request as JSON; ValueError with a one-line message naming `where`."""
    import json

    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: invalid JSON: {err.msg} (line {err.lineno} column {err.colno})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: a request is a JSON object with {', '.join(REQUEST_KEYS)}")
    unknown = sorted(set(doc) - set(REQUEST_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown field `{unknown[0]}` (fields: {', '.join(REQUEST_KEYS)})")
    return doc


def _event_line(event: Any) -> dict[str, Any]:
    from wgc.runtime.api import CancelledEvent, DoneEvent, ErrorEvent, OutputEvent

    if isinstance(event, OutputEvent):
        return {"event": "output", "request": event.request, "modality": event.modality, "payload": event.payload,
                "shape": list(event.shape), "dtype": event.dtype, "walk": event.walk, "rank": event.rank,
                "t": round(event.t_since_submit, 6)}
    if isinstance(event, DoneEvent):
        return {"event": "done", "request": event.request, "outputs": event.outputs, "t": round(event.t_since_submit, 6)}
    if isinstance(event, ErrorEvent):
        return {"event": "error", "request": event.request, "error": event.error, "t": round(event.t_since_submit, 6)}
    assert isinstance(event, CancelledEvent)
    return {"event": "cancelled", "request": event.request, "t": round(event.t_since_submit, 6)}


class Session:
    """One `wgc run`: the runtime, the requests in flight, and whether any failed. With `files`
    (-o DIR), outputs become files and errors go to stderr; otherwise every event is a JSON line."""

    def __init__(self, runtime: Any, files: Any = None) -> None:
        self.runtime = runtime
        self.files = files  # run_files.OutputDirectory, or None
        self.tasks: set[asyncio.Task[None]] = set()
        self.failed = False
        self.submitted = 0

    def error(self, where: str, message: str) -> None:
        self.failed = True
        if self.files is None:
            _json_line({"event": "error", "request": None, "error": f"{where}: {message}"})
        else:
            click.echo(f"wgc: {where}: {message}", err=True)

    def submit(self, doc: dict[str, Any], where: str) -> None:
        import asyncio

        from wgc.runtime.api import RequestError

        self.submitted += 1
        try:
            handle = self.runtime.submit(**doc)
        except (RequestError, RuntimeError) as err:
            self.error(where, str(err))
            return
        files = None if self.files is None else self.files.request(self.submitted, doc)
        task = asyncio.get_running_loop().create_task(self._stream(handle, where, files))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _stream(self, handle: Any, where: str, files: Any) -> None:
        from wgc.runtime.api import DoneEvent, ErrorEvent, OutputEvent

        async for event in handle.events():
            if files is None:
                _json_line(_event_line(event))
            elif isinstance(event, OutputEvent):
                files.add(event)
            if not isinstance(event, OutputEvent | DoneEvent):
                self.failed = True
                if files is not None:
                    self.error(where, event.error if isinstance(event, ErrorEvent) else "cancelled")
        if files is not None:
            try:
                lines = files.write()
            except OSError as err:
                self.error(where, f"cannot write its files: {err}")
                return
            for line in lines:
                _write_line(line)

    async def drain(self) -> None:
        import asyncio
        while self.tasks:
            await asyncio.gather(*list(self.tasks))


def _stdin_lines() -> asyncio.Queue[str | None]:
    """Lines of stdin as they come (None at the end), read by a daemon thread that never blocks exit."""
    import asyncio
    import threading

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(queue.put_nowait, line)
        loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=read, name="wgc-stdin", daemon=True).start()
    return queue


async def _serve(plan_file: str, fake: bool, docs: list[dict[str, Any]], from_stdin: bool, timeout: float,
                 output_dir: str | None = None, allow_modules: tuple[str, ...] | None = None) -> int:
    from wgc.cli.progress import StartupView
    from wgc.runtime.api import Runtime
    from wgc.runtime.process.heap import freeze_startup_heap

    view = StartupView()  # the ranks' start-up on stderr: bars on a terminal, lines otherwise
    try:
        started = await Runtime.start(plan_file, fake=fake, ready_timeout=timeout, allow_modules=allow_modules,
                                      on_progress=view)
    finally:
        view.close()
    freeze_startup_heap()  # a --stdin session serves for as long as its input lasts
    async with started as runtime:
        files = None
        if output_dir is None:
            pids = runtime.pids
            ranks = [{"rank": r.rank, "pid": pids[r.rank], "device": r.device} for r in runtime.plan.ranks]
            _json_line({"event": "ready", "model": runtime.plan.model, "fake": fake, "ranks": ranks})
        else:
            from wgc.cli.run_files import OutputDirectory

            files = OutputDirectory(output_dir, runtime.plan, fake, single=len(docs) == 1 and not from_stdin)
        session = Session(runtime, files)
        for i, doc in enumerate(docs, 1):
            session.submit(doc, f"--request {i}")
        if from_stdin:
            lines, number = _stdin_lines(), 0
            while (line := await lines.get()) is not None:
                number += 1
                if line.strip():
                    try:
                        session.submit(parse_request(line, f"stdin line {number}"), f"stdin line {number}")
                    except ValueError as err:
                        session.error(f"stdin line {number}", str(err).removeprefix(f"stdin line {number}: "))
        await session.drain()
        return 1 if session.failed else 0


async def _serve_http(plan_file: str, address: Any, options: Any) -> int:
    from wgc.cli.progress import StartupView
    from wgc.plan.file import load_plan
    from wgc.runtime.http.serving.server import serve
    from wgc.runtime.process.heap import freeze_startup_heap
    from wgc.runtime.process.modules import allowed_prefixes, check_components

    _, plan = load_plan(plan_file)
    if not options.fake:  # before the frontend imports the model's hooks (tokenizer, sample rate)
        check_components(plan, allowed_prefixes(plan, options.allow_modules))
    view = StartupView()

    def ready(line: dict[str, Any]) -> None:
        view.close()  # the bars end before the ready line
        freeze_startup_heap()  # the front end's start-up objects stay for the process's life
        _json_line(line)

    try:
        await serve(plan, address, options, ready, view)
    finally:
        view.close()
    return 0


def _http_options(fake: bool, api_key: str | None, max_running: int | None, max_queued: int | None,
                  request_timeout: float, ready_timeout: float, allow_modules: tuple[str, ...] | None) -> Any:
    from wgc.runtime.http.admission.slots import Capacity
    from wgc.runtime.http.serving.service import ServeOptions
    from wgc.settings import expected_context

    capacity = None
    if max_running is not None or max_queued is not None:
        running = max_running or 8
        capacity = Capacity(running, 2 * running if max_queued is None else max_queued)
    return ServeOptions(fake=fake, api_key=api_key or None, capacity=capacity, request_timeout=request_timeout,
                        ready_timeout=ready_timeout, expected_context=expected_context(), allow_modules=allow_modules)


def _serve_limits(given: tuple[str, ...]) -> tuple[tuple[str, int | float], ...]:
    """--limit NAME=VALUE values, parsed (runtime/http/admission/limits.py); ValueError names a bad one."""
    from wgc.runtime.http.admission.limits import parse_limit

    out = []
    for item in given:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--limit {item}: expected NAME=VALUE, such as max_images=4")
        out.append((name.strip(), parse_limit(name.strip(), value.strip())))
    return tuple(out)


def _api_key(given: str | None, key_file: str | None) -> str | None:
    """The Bearer key: --api-key-file, --api-key (which warns: a command line is visible to every user
    of the machine) or WGC_API_KEY; None for none. ValueError, one line, for a key that cannot be read."""
    from wgc.settings import api_key

    if given is not None and key_file is not None:
        raise ValueError("--api-key and --api-key-file do not go together: give one (the file, preferably)")
    if key_file is not None:
        try:
            lines = Path(key_file).read_text(encoding="utf-8").strip().splitlines()
        except (OSError, UnicodeDecodeError) as err:
            why = err.strerror if isinstance(err, OSError) and err.strerror else "not UTF-8 text"
            raise ValueError(f"--api-key-file {key_file}: cannot read it: {why}") from None
        if len(lines) > 1:
            raise ValueError(f"--api-key-file {key_file}: the key is one line, the file has {len(lines)}")
        if not lines:
            raise ValueError(f"--api-key-file {key_file}: the file holds no key")
        return lines[0].strip()
    if given is not None:
        if not given:
            raise ValueError("--api-key: the key is empty")
        click.echo("wgc: warning: --api-key is visible to other users of this machine (ps, /proc/PID/cmdline); "
                   "use --api-key-file PATH or WGC_API_KEY", err=True)
        return given
    return api_key()


def _module_prefixes(given: tuple[str, ...]) -> tuple[str, ...] | None:
    """--allow-module-prefix values (None when there are none: the plan's default applies)."""
    from wgc.runtime.process.modules import is_module_prefix

    bad = next((p for p in given if not is_module_prefix(p)), None)
    if bad is not None:
        raise ValueError(f"--allow-module-prefix {bad!r}: expected a dotted module name such as mypkg.models")
    return given or None


async def _until_signal(work: Any) -> int:
    """Run `work`; SIGINT or SIGTERM cancels it (the runtime stops every worker) and gives 128 + signal."""
    import asyncio

    loop = asyncio.get_running_loop()
    task = loop.create_task(work)
    got: list[int] = []

    def stop(signum: int) -> None:
        got.append(signum)
        task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop, sig)
    try:
        return await task
    except asyncio.CancelledError:
        if got:
            return 128 + got[0]
        raise


@click.command()
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option("--fake", is_flag=True, help="Fake components: any plan runs with no weights (mock outputs).")
@click.option("--request", "requests", multiple=True, metavar="JSON",
              help="A request: JSON with params, inputs, parts, outputs, task, think. Repeatable; "
                   "'-' reads one request per line from stdin until it ends.")
@click.option("-o", "--output", "output_dir", metavar="DIR", type=click.Path(file_okay=False),
              help="Write each request's outputs as files in DIR (audio.wav, image.png, text.txt, *.npy; "
                   "request n of several in DIR/n/) and print one line per file instead of the events.")
@click.option("--ready-timeout", type=float, default=120.0, show_default=True,
              help="Seconds start-up may go without progress (a loading or capture line from any rank) before it is abandoned.")
@click.option("--serve", "serve_at", metavar="[HOST]:PORT",
              help="Serve over HTTP (OpenAI-compatible routes, /v1/generate, /health, /metrics). "
                   "Binds 127.0.0.1 unless a host is given.")
@click.option("--api-key-file", metavar="PATH", type=click.Path(dir_okay=False),
              help="With --serve: require `Authorization: Bearer KEY` on /v1/*, KEY being the one line of PATH "
                   "(default: WGC_API_KEY, if set).")
@click.option("--api-key", metavar="KEY",
              help="With --serve: the key on the command line, where other users can read it (ps): prefer "
                   "--api-key-file or WGC_API_KEY.")
@click.option("--max-running", type=click.IntRange(1), metavar="N",
              help="With --serve: requests running at once (default: as many as the KV pools hold at "
                   "WGC_EXPECTED_CONTEXT tokens each, else the plan's smallest max_batch).")
@click.option("--max-queued", type=click.IntRange(0), metavar="N",
              help="With --serve: requests waiting for a slot before 429 (default: twice --max-running).")
@click.option("--request-timeout", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="With --serve: seconds a request may take, queueing included, before it is cancelled.")
@click.option("--allow-module-prefix", "allow_modules", multiple=True, metavar="PREFIX",
              help="Import component classes only from modules under PREFIX (repeatable; default: wgc.models and "
                   "the placement's [serve] allow_modules). A plan naming any other module is refused before "
                   "anything is imported.")
@click.option("--limit", "limits", multiple=True, metavar="NAME=VALUE",
              help="With --serve: a request limit, over the placement's [serve] table (repeatable), e.g. "
                   "max_images=4, max_body_bytes=16MiB, max_audio_seconds=60 (docs/http.md, Limits).")
@click.option("--headless", is_flag=True,
              help="Multi-host plans: run this host's ranks only (no HTTP, no coordinator), joined to the head "
                   "(docs/placement.md, Multi-host).")
@click.option("--node-rank", type=click.IntRange(0), metavar="K",
              help="With --headless: this host's position in the placement's [[cluster.hosts]].")
@click.option("--node", "node_name", metavar="NAME", help="With --headless: this host by its name in [[cluster.hosts]].")
@click.option("--nnodes", type=click.IntRange(1), metavar="N", help="The number of hosts, checked against the plan.")
@click.option("--master-addr", "--dist-init-addr", "master", metavar="HEAD[:PORT]",
              help="With --headless: the head's address and [transport] port (default: the plan's host 0).")
def run(plan_file: str, fake: bool, requests: tuple[str, ...], output_dir: str | None, ready_timeout: float,
        serve_at: str | None,
        api_key_file: str | None, api_key: str | None, max_running: int | None, max_queued: int | None,
        request_timeout: float,
        allow_modules: tuple[str, ...], limits: tuple[str, ...], headless: bool, node_rank: int | None,
        node_name: str | None, nnodes: int | None, master: str | None) -> None:
    """Start a coordinator and one worker process per rank; run requests; print their events as NDJSON."""
    import asyncio  # here, not at the top: `wgc check` imports this module and must start fast

    from wgc.plan.file import PlanFileError
    from wgc.runtime.process.errors import StartError

    if headless or (node_rank or 0) > 0 or node_name is not None or master is not None:
        from wgc.cli.run_node import run_headless

        run_headless(plan_file, fake, headless, node_rank, node_name, nnodes, master, ready_timeout,
                     bool(requests or serve_at or output_dir), allow_modules)
        return
    from_stdin = "-" in requests
    try:
        docs = [parse_request(text, f"--request {i}") for i, text in enumerate(requests, 1) if text != "-"]
        prefixes = _module_prefixes(allow_modules)
        if serve_at is not None and requests:
            raise ValueError("--serve and --request do not go together: send requests over HTTP")
        if output_dir is not None and not requests:
            raise ValueError("-o DIR needs --request: it writes the requests' outputs")
        if output_dir is not None:
            try:
                os.makedirs(output_dir, exist_ok=True)
            except OSError as err:
                raise ValueError(f"-o {output_dir}: {err.strerror or err}") from None
        if serve_at is None and (api_key is not None or api_key_file or max_running or max_queued is not None):
            raise ValueError("--api-key, --api-key-file, --max-running and --max-queued need --serve")
        if serve_at is not None:
            from wgc.runtime.http.serving.server import Address

            address = Address.parse(serve_at)
            options = _http_options(fake, _api_key(api_key, api_key_file), max_running, max_queued, request_timeout, ready_timeout, prefixes)
            options = dataclasses.replace(options, limits=_serve_limits(limits))
        elif limits:
            raise ValueError("--limit needs --serve")
    except ValueError as err:
        click.echo(f"wgc: {err}", err=True)
        sys.exit(EXIT_USAGE)
    try:
        if nnodes is not None:
            _check_nnodes(plan_file, nnodes)
        work = _serve(plan_file, fake, docs, from_stdin, ready_timeout, output_dir, prefixes) if serve_at is None else \
            _serve_http(plan_file, address, options)
        with asyncio.Runner(loop_factory=_loop_factory(serve_at)) as runner:
            status = runner.run(_until_signal(work))
    except PlanFileError as err:
        click.echo(f"wgc: {err}", err=True)
        sys.exit(EXIT_USAGE if err.kind == "unreadable" else 1)
    except (StartError, OSError) as err:
        click.echo(f"wgc: {err}", err=True)
        sys.exit(1)
    except OutputGone as err:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        click.echo(f"wgc: cannot write the output: {err}", err=True)
        sys.exit(1)
    sys.exit(status)


def _check_nnodes(plan_file: str, nnodes: int) -> None:
    from wgc.plan.file import load_plan
    from wgc.runtime.process.errors import StartError

    hosts = max(1, len(load_plan(plan_file)[1].hosts))
    if hosts != nnodes:
        raise StartError(f"--nnodes {nnodes}: the plan has {hosts} host{'s' if hosts != 1 else ''}")


def _loop_factory(serve_at: str | None) -> Any:
    """The event loop `--serve` runs on (uvloop's when installed: runtime/http/serving/server.py); None: asyncio's."""
    if serve_at is None:
        return None
    from wgc.runtime.http.serving.server import loop_factory

    return loop_factory()
