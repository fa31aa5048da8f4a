"""Text in and out of the frontend: tokens, the chat template, the prompt, text deltas.

    tokenizer.py     the Tokenizer protocol, the component hook, the byte-level fallback
    template.py      the chat template in a Jinja2 sandbox; media kept in order
    prompt.py        a prompt as the plan takes it: parts or named inputs
    detok.py         UTF-8-safe incremental decoding and stop strings
    choice.py        one text choice: deltas, token counts, finish_reason
"""
