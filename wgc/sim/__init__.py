"""Interpreters on mock components: the reference (checked AST, unplaced) and the plan simulator.

    run_reference(check_result, request) -> {modality: [values]}   (wgc.sim.reference)
    simulate(plan, request)              -> the same, from the per-rank schedules (wgc.sim.simulator)
    verify(plan)                         -> [problems], the compiler's verification pass (wgc.sim.verify)

Import the submodules directly: this package stays empty so that the runtime, which shares only
the mock values (wgc.sim.mock) and their expressions, does not pay for the parser and checker.
"""
