"""Prometheus metrics of one server: its own registry (no process-global state), read at /metrics.

Measured here: requests by route and status, time to first output and time between outputs per
modality, intervals between chunks written to streaming responses, running and queued requests.
Read from the ranks at each scrape (`runtime.health()` counters, keyed by the plan's component
names): whether each rank is up, KV pages used and free per rank and component, batched calls
and the runs they held (mean batch size = runs / batched calls), and per component entry, when a
component reports them as `<entry>.calls`, `<entry>.items` and `<entry>.compute_us`, its batches,
batched items and compute time. Every other counter appears as `wgc_rank_counter` (a rank's cycle
collector among them: `gc_frozen_objects`, `gc_full_collections`); the front end's own collector is
`wgc_frontend_gc_frozen_objects` and `wgc_frontend_gc_full_collections` (runtime/process/heap.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from wgc.runtime.process.heap import gc_counters

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_ENTRY_COUNTERS = {"calls": "wgc_component_batches", "items": "wgc_component_batch_items",
                   "compute_us": "wgc_component_compute_seconds"}


# Executor counters (runtime/worker/executor.py, batching.py) with a metric family of their own.
_RANK_COUNTERS = {
    "batched_calls": ("wgc_rank_batched_calls", "batched component calls"),
    "runs": ("wgc_rank_runs", "RUN instructions executed (items of batched calls)"),
    "preemptions": ("wgc_scheduler_preemptions", "requests whose KV pages were taken back to let an older one grow"),
    "deferred_calls": ("wgc_scheduler_deferred_calls", "calls put off to a later round for KV pages or token budget"),
    "partial_calls": ("wgc_scheduler_partial_calls", "calls that wrote one chunk of a longer prompt"),
    "calls_failed_alone": ("wgc_scheduler_calls_failed_alone", "calls failed on their own request's input, "
                           "their batch-mates run"),
}


class RankCollector:
    """Metric families from the last health report, refreshed by the /metrics handler before each scrape."""

    def __init__(self) -> None:
        self.report: Any = None  # the last HealthReport

    def describe(self) -> list[Metric]:
        return []  # families depend on the plan's components: nothing to declare up front

    def collect(self) -> Iterator[Metric]:
        report = self.report
        if report is None:
            return
        up = GaugeMetricFamily("wgc_rank_up", "1 while the rank's process is alive and answering", labels=["rank"])
        pages = GaugeMetricFamily("wgc_kv_pages", "KV cache pages per rank and component", labels=["rank", "component",
                                                                                                   "state"])
        raw = GaugeMetricFamily("wgc_rank_counter", "every counter a rank reports", labels=["rank", "name"])
        per_rank = {key: CounterMetricFamily(name, text, labels=["rank"]) for key, (name, text) in _RANK_COUNTERS.items()}
        prefix = CounterMetricFamily("wgc_prefix_cache_tokens", "prompt tokens looked up in the prefix cache and "
                                     "found there, per rank and component", labels=["rank", "component", "outcome"])
        entries = {name: CounterMetricFamily(name, f"per component entry: {key}", labels=["rank", "component", "entry"])
                   for key, name in _ENTRY_COUNTERS.items()}
        for r in report.ranks:
            rank = str(r.rank)
            up.add_metric([rank], 1.0 if r.state == "up" else 0.0)
            for name, value in sorted(r.counters.items()):
                raw.add_metric([rank, name], float(value))
                self._classify(rank, name, float(value), pages, per_rank, prefix, entries)
        yield from (up, pages, *per_rank.values(), prefix, *entries.values(), raw)

    @staticmethod
    def _classify(rank: str, name: str, value: float, pages: GaugeMetricFamily, per_rank: dict[str, CounterMetricFamily],
                  prefix: CounterMetricFamily, entries: dict[str, CounterMetricFamily]) -> None:
        family = per_rank.get(name)
        if family is not None:
            family.add_metric([rank], value)
            return
        component, _, key = name.partition(".")
        if key in ("kv_pages_used", "kv_pages_free"):
            pages.add_metric([rank, component, key.removeprefix("kv_pages_")], value)
        elif key in ("prefix_queried_tokens", "prefix_hit_tokens"):
            prefix.add_metric([rank, component, "queried" if key == "prefix_queried_tokens" else "hit"], value)
        entry, _, stat = key.rpartition(".")
        if entry and stat in _ENTRY_COUNTERS:
            scale = 1e-6 if stat == "compute_us" else 1.0
            entries[_ENTRY_COUNTERS[stat]].add_metric([rank, component, entry], value * scale)


class FrontendGc:
    """The front end's own cycle collector (runtime/process/heap.py); each rank's is in its counters."""

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        counters = gc_counters()
        yield GaugeMetricFamily("wgc_frontend_gc_frozen_objects", "objects the front end froze after start-up",
                                value=counters["gc_frozen_objects"])
        yield CounterMetricFamily("wgc_frontend_gc_full_collections", "full collections of the front end's heap",
                                  value=counters["gc_full_collections"])


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.requests = Counter("wgc_http_requests", "HTTP requests by route and status", ["route", "status"],
                                registry=r)
        self.duration = Histogram("wgc_http_request_duration_seconds", "time from request to last byte", ["route"],
                                  buckets=LATENCY_BUCKETS, registry=r)
        self.first_output = Histogram("wgc_time_to_first_output_seconds", "submit to first output, per modality",
                                      ["modality"], buckets=LATENCY_BUCKETS, registry=r)
        self.inter_output = Histogram("wgc_inter_output_seconds", "between consecutive outputs of a request, "
                                      "per modality", ["modality"], buckets=LATENCY_BUCKETS, registry=r)
        self.chunk_interval = Histogram("wgc_stream_chunk_interval_seconds", "between chunks written to a "
                                        "streaming response", ["route"], buckets=LATENCY_BUCKETS, registry=r)
        self.running = Gauge("wgc_requests_running", "requests holding admission slots", registry=r)
        self.queued = Gauge("wgc_queue_depth", "requests waiting for a slot", registry=r)
        self.in_flight = Gauge("wgc_runtime_requests_in_flight", "requests the coordinator tracks", registry=r)
        self.rejected = Counter("wgc_admission_rejected", "requests refused with 429", registry=r)
        self.cancelled = Counter("wgc_requests_cancelled", "runtime requests the HTTP layer cancelled before "
                                 "they ended (the client left, a timeout, a stop string)", registry=r)
        self.ranks = RankCollector()
        r.register(self.ranks)  # type: ignore[arg-type]
        r.register(FrontendGc())  # type: ignore[arg-type]

    def render(self) -> bytes:
        return generate_latest(self.registry)
