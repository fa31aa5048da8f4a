"""What a plan means, written once for the compiler's simulator (wgc/sim) and the runtime (runtime/).

    flows.py          a flow as a state machine (FlowTable, FlowCursor), the walks a flow names
    stream_policy.py  chunk policies as three numbers
    stream_buffer.py  one stream of one request: items in, chunks out, credits, its end
    exprs.py          the environment an expression reads and the one dispatch over expression kinds
    mock_exprs.py     expression rules over mock values (the simulator, fake components)
    python_exprs.py   expression rules over run-time values (real components)
    mock.py           mock values and mock components
    loops.py          LOOP/ENDLOOP matching
    plan_index.py     a plan indexed by (rank, walk), its shape checked; the streams a walk touches

Neither side imports the other: wgc/sim and runtime/ both import this package, which imports only
wgc.plan (the plan's data model). Import the submodules directly: this package stays empty, so that a
worker pays for nothing it does not use. docs/architecture.md says which parts are shared here and
which are deliberately written twice (the instruction interpreters), and why.
"""
