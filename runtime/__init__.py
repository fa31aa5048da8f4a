"""wgc.runtime: the coordinator, workers and HTTP frontend that serve a compiled plan.

    api.py         the Python API (Runtime: start, submit, stream events, cancel, health)
    components/    the interface model components implement (base.py), fake components
    protocol/      the messages between coordinator and workers, and the wire codec
    coordinator/   the coordinator's logic without I/O: requests, flow starts, completion
    worker/        one rank: executor, interpreter, scheduler, batching, streams, the request env
    process/       the ranks as processes (ZeroMQ, supervisor, multi-host) or in one thread (local.py)
    engines/       KV pages and engine, attention, sampling, CUDA graphs
    http/          the HTTP frontend (its __init__.py lists its subpackages)
"""
