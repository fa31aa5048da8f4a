"""Components: what a model family implements for the runtime, and the stand-ins that need no weights.

    base.py   the interface every model component implements (Component, Call, CallError, load_class)
    fake.py   fake components answering with the simulator's mock semantics (`wgc run --fake`)
"""
