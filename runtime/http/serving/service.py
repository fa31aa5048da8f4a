"""The served model: the plan, the runtime once it is up, and what every route needs from them.

Routes exist from the moment the server binds (the plan is loaded first); until every rank
reported ready they answer 503 `not_ready`. One Service per server, held by the app: there is no
module-level state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from wgc.runtime.api import HealthReport, RankDownError, RequestError, Runtime, StartupLine, request_spec
from wgc.runtime.coordinator.request import resolve_params
from wgc.runtime.http.admission import capacity as sizing
from wgc.runtime.http.admission.context import Context
from wgc.runtime.http.admission.limits import CHARS_PER_POSITION, DEFAULT_PROMPT_CHARS, Limits, check_count
from wgc.runtime.http.admission.offload import Offload
from wgc.runtime.http.admission.running import Running
from wgc.runtime.http.admission.slots import Admission, Capacity, Full, TooWide
from wgc.runtime.http.media.decode import configure_pillow
from wgc.runtime.http.serving import plan_schemas
from wgc.runtime.http.serving.capabilities import Capabilities
from wgc.runtime.http.serving.errors import ApiError, clipped
from wgc.runtime.http.serving.metrics import Metrics
from wgc.runtime.http.serving.outputs import OutputFormats
from wgc.runtime.http.text.template import ChatTemplate
from wgc.runtime.http.text.tokenizer import ByteTokenizer, Tokenizer, chat_template

from wgc.plan.model import Plan
from wgc.settings import DEFAULT_EXPECTED_CONTEXT

SIZING_TIMEOUT = 5.0  # seconds the ranks have to report their KV pools at start-up
log = logging.getLogger("wgc.http")


@dataclass(frozen=True)
class ServeOptions:
    fake: bool = False
    api_key: str | None = None
    capacity: Capacity | None = None  # None: from the KV pools, else max_batch (see admission/capacity.py)
    expected_context: int = DEFAULT_EXPECTED_CONTEXT  # KV tokens per request and label (admission/capacity.py)
    request_timeout: float = 600.0  # seconds, queue wait included; a request may ask for less
    limits: tuple[tuple[str, int | float], ...] = ()  # --limit NAME=VALUE, over the plan's [serve] (admission/limits.py)
    ready_timeout: float = 120.0
    allow_modules: tuple[str, ...] | None = None  # module prefixes for component classes (process/modules.py)


class Service:
    def __init__(self, plan: Plan, options: ServeOptions) -> None:
        self.plan = plan
        self.options = options
        self.caps = Capabilities.of(plan)
        self.sizing = sizing.from_option(options.capacity) if options.capacity else sizing.from_max_batch(plan)
        # `n`'s bound in the request models is fixed here: the slots may change once the KV pools are
        # known, and a request wider than the slots then is refused by `admitted`.
        self.limits = Limits.of(plan.settings, dict(options.limits))
        configure_pillow(self.limits.max_image_pixels)
        self.max_choices = min(self.sizing.capacity.max_running, self.limits.max_n or self.sizing.capacity.max_running)
        formats = OutputFormats.of(self.caps, options.fake)
        self.voices = formats.voices
        self.models = plan_schemas.build(self.caps, self.max_choices, self.limits, plan, formats.voices)
        self.tokenizer: Tokenizer = formats.tokenizer
        self.context = Context(plan, self.limits.max_prompt_tokens,
                               counts=options.fake or not isinstance(self.tokenizer, ByteTokenizer))
        self.max_prompt_chars = self.limits.max_prompt_chars or (
            CHARS_PER_POSITION * self.context.positions.tokens if self.context.positions else DEFAULT_PROMPT_CHARS)
        self.offload = Offload()
        self.template = ChatTemplate(chat_template(self.tokenizer), getattr(self.tokenizer, "bos_token", "") or "",
                                     getattr(self.tokenizer, "eos_token", "") or "",
                                     getattr(self.tokenizer, "template_tokens", None))
        self.end_ids = formats.end_ids
        self._rate = formats.sample_rate
        self.admission = Admission(self.sizing.capacity)
        self.metrics = Metrics()
        self.runtime: Runtime | None = None
        self.state = "starting"  # starting, ready, stopping
        self._background: set[asyncio.Task[None]] = set()
        self.created = int(time.time())

    def sample_rate(self) -> int:
        return self._rate

    # ---- lifecycle ----------------------------------------------------------------------------

    @property
    def capacity(self) -> Capacity:
        return self.sizing.capacity

    async def start(self, on_progress: Callable[[StartupLine], None] | None = None) -> Runtime:
        self.runtime = await Runtime.start(self.plan, fake=self.options.fake, ready_timeout=self.options.ready_timeout,
                                           allow_modules=self.options.allow_modules, on_progress=on_progress)
        self.observe(await self.runtime.health(timeout=SIZING_TIMEOUT))
        self.state = "ready"
        return self.runtime

    def observe(self, report: HealthReport) -> None:
        """Size the slots from the KV pools the ranks report, once they do (then they stay); an
        explicit capacity is never changed."""
        self.context.observe(report)
        if self.sizing.source != "max_batch":
            return
        found = sizing.from_kv_pools(self.plan, report, self.options.expected_context)
        if found is not None:
            self.sizing = found
            self.admission.resize(found.capacity)
            log.info("wgc http: %d running, %d queued (%s)", found.capacity.max_running, found.capacity.max_queued,
                     found.detail)

    async def close(self) -> None:
        self.state = "stopping"
        if self.runtime is not None:
            await self.runtime.close()  # cancels every request: the releases in flight finish at once
        if self._background:
            await asyncio.wait(list(self._background), timeout=5)

    def background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` (a lease's release) without making anyone wait for it; failures are logged."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("wgc http: releasing a request failed", exc_info=task.exception())

    def live(self) -> Runtime:
        if self.state == "stopping":
            raise ApiError("shutting_down", "the server is stopping", headers={"Retry-After": "5"})
        if self.runtime is None:
            raise ApiError("not_ready", "the ranks are still loading", headers={"Retry-After": "2"})
        return self.runtime

    # ---- checks shared by the routes ------------------------------------------------------------

    def check(self, route: str, model: str | None) -> None:
        why = self.caps.unsupported(route)
        if why is not None:
            raise ApiError("route_not_supported", why)
        if model is not None and model != self.plan.model:
            raise ApiError("model_not_found", f"model `{clipped(model)}` is not served here (this server serves "
                                              f"`{self.plan.model}`)", "model")

    def check_n(self, n: int) -> None:
        check_count(n, self.max_choices, "max_n", "choices", "n")

    def params(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Plan params, type- and bound-checked (defaults filled in)."""
        voice = self.caps.param(*plan_schemas.VOICE_PARAMS)
        if voice is not None and given.get(voice.name) is not None:
            self.check_voice(given[voice.name], f"params.{voice.name}")
        try:
            return resolve_params(self.plan.params, dict(given))
        except RequestError as err:
            raise ApiError("invalid_request", str(err), "params") from None

    def check_voice(self, value: Any, param: str) -> None:
        """400 naming `param` and the voices this model has, for a voice it does not have."""
        if self.voices is not None and value not in self.voices:
            raise ApiError("unsupported_value", f"{param}: {clipped(str(value))!r} is not a voice of model "
                           f"`{self.plan.model}` (its voices: {', '.join(self.voices) or 'none'})", param)

    def deadline(self, timeout: float | None) -> float:
        limit = self.options.request_timeout if timeout is None else min(timeout, self.options.request_timeout)
        return time.monotonic() + limit

    @asynccontextmanager
    async def admitted(self, weight: int, deadline: float) -> AsyncIterator[None]:
        """Hold `weight` admission slots: 429 when none is free and the queue is full, 504 when the
        wait in the queue outlasts the deadline."""
        self.live()
        slot = self.admission.slot(weight, max(0.0, deadline - time.monotonic()))
        try:
            await slot.__aenter__()
        except TooWide as wide:
            raise ApiError("invalid_request", f"n = {wide.weight} choices exceed the {wide.slots} requests this "
                           f"server runs at once ({self.sizing.source})", "n") from None
        except Full as full:
            self.metrics.rejected.inc()
            raise ApiError("over_capacity", f"all {self.capacity.max_running} slots and {self.capacity.max_queued} "
                           f"queue places are taken", headers={"Retry-After": str(full.retry_after)}) from None
        except TimeoutError:
            raise ApiError("request_timeout", "the request waited past its timeout for a slot") from None
        self._gauges()
        try:
            yield
        finally:
            await slot.__aexit__(None, None, None)
            self._gauges()

    def _gauges(self) -> None:
        self.metrics.running.set(self.admission.running)
        self.metrics.queued.set(self.admission.queued)

    def submit(self, deadline: float, **fields: Any) -> Running:
        runtime = self.live()
        try:
            handle = runtime.submit_spec(request_spec(**fields))
        except RequestError as err:
            raise ApiError("invalid_request", str(err)) from None
        except RankDownError as err:
            raise ApiError("rank_down", str(err)) from None
        return Running(handle, self.metrics, deadline)
