"""Every diagnostic code the placement loader emits, with its stable slug and what it means.

Same shape as `wgc/diag/codes.py` (to be merged into that table). Codes are never reused or
renumbered: tools match on them. `docs/placement.md` lists them; a test checks that every code
here has an example in tests/placement/errors/.
"""

from __future__ import annotations

from wgc.diag.codes import Code

PLACEMENT_CODES: dict[str, Code] = {
    "P001": Code("toml-syntax", "the placement file is not valid TOML"),
    "P002": Code("unknown-key", "a key the placement schema does not define (never silently ignored)"),
    "P003": Code("bad-value", "a value of the wrong type, or not one of the values the key allows"),
    "P004": Code("missing-key", "a required key is absent"),
    "P005": Code("unreadable-file", "a placement file or `extends` base that cannot be read"),
    "P006": Code("extends-cycle", "placement files that extend each other in a cycle, or a chain too deep"),
    "P007": Code("model-mismatch", "the placement is written for a different model than the program"),
    "P008": Code("unknown-component", "a component the program does not declare"),
    "P009": Code("unknown-walk", "a walk the program does not declare"),
    "P010": Code("unknown-branch", "a branch name no `parallel` block of the walk declares"),
    "P011": Code("unknown-stream", "a stream the program does not declare"),
    "P012": Code("rank-out-of-range", "a rank outside 0 .. cluster.ranks - 1"),
    "P013": Code("component-unplaced", "a component with no ranks and no default placement"),
    "P014": Code("tp-not-dividing", "a tensor-parallel degree that does not divide the component's rank count"),
    "P015": Code("pin-outside-component", "a walk or branch pinned to ranks that do not hold whole copies of the component"),
    "P016": Code("component-not-in-walk", "a per-walk placement for a component that walk never calls"),
    "P017": Code("routing-required", "a component with several copies and unpinned calls but no routing policy"),
    "P018": Code("bad-engine-setting", "engine settings that cannot work (fraction, buckets, max batch, token budget, kv sizing, a max batch over the KV pool's pages)"),
    "P019": Code("bad-hosts", "host rank ranges that overlap or do not cover every rank, or more cuda ranks on a host than it holds GPUs"),
    "P020": Code("bad-transport", "a transport the cluster's device kind cannot use"),
    "P021": Code("bad-stream-setting", "a stream capacity below one chunk, or an item size that cannot be computed"),
    "P022": Code("memory-overflow", "a rank whose weights, KV pool, CUDA-graph pools and buffers exceed its memory"),
    "P023": Code("kv-pool-too-small", "a KV pool that cannot hold one sequence of the component's max_seq_len, or not one page"),
    # Warnings (W1xx: the language's are W0xx): the placement loads, the warning rides on it.
    "W101": Code("tp-across-hosts", "a tensor-parallel copy whose ranks are on different hosts: its all-reduces cross the network every layer"),
}
