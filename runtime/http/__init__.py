"""The HTTP frontend: a compiled plan served over OpenAI-compatible and native routes (docs/http.md).

Grouped by what each part serves; each subpackage's `__init__.py` lists its files:

    openai/     the OpenAI-compatible routes: chat, completions, speech, images
    native/     wgc's own routes: generate (any walk, NDJSON), world model, policy, models/health/metrics
    text/       text in and out: tokenizers, the chat template, prompts, incremental decoding, choices
    media/      images and audio in and out: data URLs and uploads decoded, PCM16/WAV, PNG
    admission/  what a request may take and hold: limits, context, slots and queue, lease, deadline, threads
    serving/    the server and the app around the routes: front door, errors, schemas, OpenAPI,
                the served model and what its plan can serve, streaming, metrics, the page (static/)
"""
