"""GET /v1/models, /health and /metrics: what is served, whether every rank is alive, the numbers."""

from __future__ import annotations

from starlette.responses import Response
from wgc.runtime.http.serving.errors import ApiError, clipped, error_body
from wgc.runtime.http.serving.service import Service
from wgc.runtime.http.serving.streaming import json_response

HEALTH_TIMEOUT = 2.0  # seconds a rank has to answer a health probe


def model_card(service: Service) -> dict[str, object]:
    caps = service.caps
    params = [{"name": p.name, "type": p.type, "default": p.default, "low": p.low, "high": p.high,
               "choices": p.choices} for p in service.plan.params]
    return {"id": service.plan.model, "object": "model", "created": service.created, "owned_by": "wgc",
            "routes": caps.routes(), "params": params, "emits": sorted(caps.emits), "fake": service.options.fake}


def models(service: Service) -> Response:
    return json_response({"object": "list", "data": [model_card(service)]})


def model(service: Service, model_id: str) -> Response:
    if model_id != service.plan.model:
        raise ApiError("model_not_found", f"model `{clipped(model_id)}` is not served here (this server serves "
                                          f"`{service.plan.model}`)", "model")
    return json_response(model_card(service))


async def health(service: Service) -> Response:
    """200 while every rank's process is alive (a rank busy past the probe's timeout is `unresponsive`
    but alive); 503 naming the first rank that is down. Each rank lists its CUDA graphs: per captured
    entry, the buckets captured, those that failed and why, or why it runs eagerly. `capacity`: the
    admission slots and queue, and where they came from (admission/capacity.py)."""
    runtime = service.live()
    report = await runtime.health(timeout=HEALTH_TIMEOUT)
    service.metrics.ranks.report = report
    service.observe(report)
    ranks = [{"rank": r.rank, "pid": r.pid, "state": r.state, "reason": r.reason, "counters": r.counters,
              "captures": [c.as_dict() for c in r.captures]} for r in report.ranks]
    if not all(r.alive for r in report.ranks):
        bad = next(r for r in report.ranks if not r.alive)
        why = f"rank {bad.rank} is {bad.state}" + (f": {bad.reason}" if bad.reason else "")
        body = {**error_body("rank_down", why), "ranks": ranks}
        return json_response(body, status=503, headers={"Retry-After": "5"})
    return json_response({"status": "ok" if report.ok else "busy", "model": service.plan.model,
                          "requests_in_flight": report.requests_in_flight, "capacity": service.sizing.as_dict(),
                          "ranks": ranks})


async def metrics(service: Service) -> Response:
    service.metrics.running.set(service.admission.running)
    service.metrics.queued.set(service.admission.queued)
    if service.runtime is not None and service.state == "ready":
        report = await service.runtime.health(timeout=HEALTH_TIMEOUT)
        service.metrics.ranks.report = report
        service.observe(report)
        service.metrics.in_flight.set(report.requests_in_flight)
    return Response(service.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
