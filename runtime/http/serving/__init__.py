"""The server and the app around the routes: what every route shares.

    server.py        bind, start uvicorn, start the ranks, report ready, stop cleanly
    app.py           the FastAPI app: routes, error handlers, the OpenAPI document
    frontdoor.py     ASGI layer: API key, body size, per-route request metrics
    openapi.py       what FastAPI cannot infer: error answers, streamed bodies, the edit form
    service.py       the served model: plan, runtime, checks and helpers every route uses
    capabilities.py  what a plan serves, read from its walks and flows; where a prompt goes
    hooks.py         functions a model's component module may define for the frontend
    outputs.py       how emitted values read: tokenizer, end tokens, audio sample rate
    schemas.py       OpenAI-shaped bodies shared by every plan
    plan_schemas.py  request models derived from the plan's params
    validation.py    pydantic's validation errors as ApiErrors
    errors.py        ApiError, the OpenAI error shape, the table of stable codes
    streaming.py     JSON, SSE and NDJSON frames; merged streams; work that stops on disconnect
    metrics.py       the Prometheus registry of one server
    page.py          GET /: a page of forms for the plan's routes (the files in static/)
"""
