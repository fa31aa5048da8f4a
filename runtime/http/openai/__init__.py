"""The OpenAI-compatible routes: what an OpenAI client sends, answered from the plan.

    chat.py          POST /v1/chat/completions (whole or SSE)
    completions.py   POST /v1/completions: text completions, no chat template
    speech.py        POST /v1/audio/speech
    images.py        POST /v1/images/generations and /v1/images/edits
    chat_input.py    chat messages and fields into prompt pieces and plan params
"""
