"""Placement files: where each component of a `.walk` program runs, and whether it fits.

    placement, diagnostics = load_placement(Path("placements/3xh100.toml"), program)
    table = estimate_memory(placement, program)   # per-rank memory, as `wgc inspect` shows it

The life of a placement file, in one pass (`load.py`): document (tomllib values + `locate`
positions, `extends` bases merged) → the schema (`spec.py`: one typed struct per table, each key
with its reader, bounds and default) → the rules between keys and against the program's facts
(`cluster.py`, `placing.py`, `engines.py`) → fit (`memory.py`: the memory table, arithmetic per
rank). Codes P001.. and the warnings W1xx are in `wgc/diag/codes.py` (PLACEMENT_CODES); a placement
that loads carries its warnings in `Placement.warnings`.
"""

from wgc.diag.codes import PLACEMENT_CODES
from wgc.placement.load import load_placement
from wgc.placement.memory import MemoryTable, capacity_of, estimate_memory
from wgc.placement.schema import Placement

# The public face; the types a placement is made of are in wgc.placement.schema.
__all__ = ["PLACEMENT_CODES", "MemoryTable", "Placement", "capacity_of", "estimate_memory", "load_placement"]
