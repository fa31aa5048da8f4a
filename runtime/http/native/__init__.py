"""wgc's own routes: any walk of any plan, and the shapes a robot client calls.

    generate.py      POST /v1/generate: the runtime's request as JSON, typed NDJSON events back
    values.py        the native routes' values: tensors and data URLs in, outputs as JSON out
    world_model.py   POST /v1/world_model/rollout and /v1/world_model/plan
    policy.py        POST /v1/policy/actions: one action chunk per call
    info.py          GET /v1/models, /health, /metrics
"""
