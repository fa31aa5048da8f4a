"""Engines: the KV page allocator (kv_pages.py) and batched sampling (sampling.py)."""
