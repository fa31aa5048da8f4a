"""The runtime as processes: one worker process per rank and the coordinator, wired by ZeroMQ;
and, for tests and benchmarks, every rank in one thread (local.py), through the same codec.

    endpoints.py    where every process listens (IPC sockets in a private directory)
    wire.py         sockets and the codec: every message as msgpack frames, tensors zero-copy
    gate.py         a worker holds a request's messages until the request itself has arrived
    worker.py       one rank: its executor behind a PULL socket
    worker_main.py  the worker process entry (`python -m wgc.runtime.process.worker_main`)
    supervisor.py   starts the workers, waits for them, watches them, stops them
    modules.py      which component modules a worker may import; its import path without the cwd
    probes.py       HealthQuery round trips: health reports and ordering barriers
    coordinator.py  the coordinator's sockets around CoordinatorCore, on the asyncio loop
    events.py       what a request's caller receives: typed output and end events
    handle.py       one submitted request: its events, collect, cancel with acknowledgements
    errors.py       StartError, RankDownError
    local.py        LocalCluster: every rank in one thread, an in-memory wire, no sockets

No pickle anywhere: processes start with `subprocess` and plain string arguments,
messages travel as msgspec structs through `wgc.runtime.protocol.codec`.
"""
