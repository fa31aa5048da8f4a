"""Interpreters on mock components: the reference (checked AST, unplaced) and the plan simulator.

    run_reference(check_result, request) -> {modality: [values]}   (wgc.sim.reference)
    simulate(plan, request)              -> the same, from the per-rank schedules (wgc.sim.simulator)
    verify(plan)                         -> [problems], the compiler's verification pass (wgc.sim.verify)

What both interpreters share with the runtime (flow tables, streams, mock values, expressions, the plan
index) is wgc.semantics; nothing here is imported by the runtime. Import the submodules directly: this
package stays empty, so the compiler's verify pass does not pay for the reference's checker imports.
"""
