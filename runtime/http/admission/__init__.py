"""What a request may take and hold, checked and given before the work it bounds.

    limits.py        the request limits ([serve], --limit) and the media budget
    context.py       prompt tokens and max_tokens against the model's positions and the KV pool
    slots.py         running slots, a bounded queue, 429 with Retry-After
    capacity.py      how many slots: --max-running, the KV pools the ranks report, or max_batch
    lease.py         a request's slots and runtime requests, released in the background
    running.py       one runtime request: events under a deadline, cancel with acknowledgements
    offload.py       blocking request work (decoding, templates, tokens) on a few threads, off the loop
"""
