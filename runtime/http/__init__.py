"""The HTTP frontend: a compiled plan served over OpenAI-compatible and native routes (docs/http.md).

    server.py        bind, start uvicorn, start the ranks, report ready, stop cleanly
    app.py           the FastAPI app: routes, error handlers, the OpenAPI document
    frontdoor.py     ASGI layer: API key, body size, per-route request metrics
    openapi.py       what FastAPI cannot infer: error answers, streamed bodies, the edit form
    service.py       the served model: plan, runtime, checks and helpers every route uses
    capabilities.py  what a plan serves, read from its walks and flows; where a prompt goes
    schemas.py       OpenAI-shaped bodies shared by every plan
    plan_schemas.py  request models derived from the plan's params
    validation.py    pydantic's validation errors as ApiErrors
    errors.py        ApiError, the OpenAI error shape, the table of stable codes
    limits.py        the request limits ([serve], --limit) and the media budget, checked before the work
    context.py       prompt tokens and max_tokens against the model's positions and the KV pool
    offload.py       blocking request work (decoding, templates, tokens) on a few threads, off the loop
    admission.py     running slots, a bounded queue, 429 with Retry-After
    capacity.py      how many slots: --max-running, the KV pools the ranks report, or max_batch
    lease.py         a request's slots and runtime requests, released in the background
    running.py       one runtime request: events under a deadline, cancel with acknowledgements
    streaming.py     JSON, SSE and NDJSON frames; merged streams; work that stops on disconnect
    metrics.py       the Prometheus registry of one server
    hooks.py         functions a model's component module may define for the frontend
    tokenizer.py     the Tokenizer protocol, the component hook, the byte-level fallback
    outputs.py       how emitted values read: tokenizer, end tokens, audio sample rate
    detok.py         UTF-8-safe incremental decoding and stop strings
    choice.py        one text choice: deltas, token counts, finish_reason
    template.py      the chat template in a Jinja2 sandbox; media kept in order
    prompt.py        a prompt as the plan takes it: parts or named inputs
    chat_input.py    chat messages and fields into prompt pieces and plan params
    media.py         data URLs, images and WAV in, with size limits
    audio.py         PCM16 and WAV out, whole or streamed
    png.py           image tensors as PNG
    values.py        the native route's values: tensors in and out
    chat.py          POST /v1/chat/completions
    speech.py        POST /v1/audio/speech
    images.py        POST /v1/images/generations and /v1/images/edits
    generate.py      POST /v1/generate (NDJSON)
    info.py          GET /v1/models, /health, /metrics
    page.py          GET /: a page of forms for the plan's routes (the files in static/)
"""
