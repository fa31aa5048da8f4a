"""Every diagnostic code wgc emits, with its stable slug and what it means.

Codes are never reused or renumbered: tools match on them. `docs/language.md` lists the
language's (E/W0xx), `docs/placement.md` the placement reader's (P, W1xx); a test checks that every
code has an example in tests/errors/ or tests/placement/errors/.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Code:
    slug: str
    summary: str


CODES: dict[str, Code] = {
    "E001": Code("syntax-error", "the text does not follow the grammar"),
    "E002": Code("nesting-too-deep", "blocks or expressions nested deeper than the limit"),
    "E003": Code("duplicate-name", "a name declared twice in one scope"),
    "E004": Code("unknown-name", "a value, param or request field that is not defined"),
    "E005": Code("unknown-component", "a component that is not declared"),
    "E006": Code("unknown-entry", "a component entry point or const that is not declared"),
    "E007": Code("unknown-walk", "a flow names a walk that is not declared"),
    "E008": Code("unknown-stream", "a send, recv or `on` names a stream that is not declared"),
    "E009": Code("unknown-label", "a cache label that no kv component declares"),
    "E010": Code("unknown-type", "a type name or dtype that does not exist"),
    "E011": Code("type-mismatch", "a value's type differs from the type expected where it is used"),
    "E012": Code("dim-mismatch", "a tensor dimension differs from the one expected"),
    "E013": Code("use-before-definition", "a value read before it is assigned"),
    "E014": Code("carry-without-initial-value", "a loop-carried value with no value before the loop"),
    "E015": Code("accumulated-read-in-loop", "an accumulated channel read inside its own loop"),
    "E016": Code("yield-name-clash", "terminal and accumulated channels of a loop share a name"),
    "E017": Code("dynamic-loop-without-bound", "`loop until` with no `max` bound"),
    "E018": Code("unbounded-loop-param", "a loop bound param with no declared upper bound, or a non-integer bound"),
    "E019": Code("invalid-chunk-policy", "an unknown chunk policy or sizes that cannot work"),
    "E020": Code("stream-without-producer", "a stream nothing sends to"),
    "E021": Code("stream-without-consumer", "a stream nothing reads"),
    "E022": Code("walk-unreachable", "a walk no flow can reach from `start`"),
    "E023": Code("flow-cannot-finish", "a flow state from which `done` cannot be reached"),
    "E024": Code("label-on-stateless", "a cache label used with a component that has no KV cache"),
    "E025": Code("loop-reassign-without-carry", "a value from outside a loop reassigned inside it without `carry`"),
    "E026": Code("bad-emit", "an unknown output modality, or a value of the wrong type for it"),
    "E027": Code("invalid-param", "a param with an unknown type, bad bounds or a default outside them"),
    "E028": Code("wrong-arguments", "a call with too many, too few or unknown arguments"),
    "E029": Code("unknown-import", "a component class whose module alias is not imported"),
    "E030": Code("unknown-engine", "an engine kind other than `kv` or `stateless`"),
    "E031": Code("flow-binding", "a walk's inputs cannot be bound from the walk before it"),
    "E032": Code("bad-return", "a walk that declares a result but does not return one, or returns the wrong thing"),
    "E033": Code("invalid-fork", "a fork of a label into itself or across components"),
    "E034": Code("bad-end-of-stream", "an unknown at_end/after_end rule, or a consumer that cannot take the final fragment"),
    "E035": Code("bad-model-header", "a program without exactly one `model` declaration"),
    "E036": Code("unknown-attribute", "a component attribute that does not exist or has the wrong kind of value"),
    "E037": Code("invalid-condition", "a condition that is not boolean or reads something conditions cannot see"),
    "E038": Code("bad-parallel-branch", "a parallel branch without a name, or branches that depend on each other"),
    "E039": Code("unknown-part-kind", "an each-arm kind other than text, image, audio, video or `_`"),
    "E040": Code("bad-stream-consumer", "a stream consumed twice, or a consumer walk whose input is not the chunk type"),
    "E041": Code("recv-outside-loop", "`recv` outside a loop: a stream is read one chunk per loop iteration"),
    "E042": Code("schedule-verification", "the lowered per-rank schedules fail simulation (deadlock, unmatched transfer, use after free)"),
    "W001": Code("unused-component", "a component no walk calls"),
    "W002": Code("unused-param", "a param nothing reads"),
    "W003": Code("unused-value", "a value assigned and never read"),
}

# The placement reader's (wgc/placement). Warnings W1xx: the language's are W0xx.
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
    # Warnings: the placement loads, the warning rides on it (Placement.warnings).
    "W101": Code("tp-across-hosts", "a tensor-parallel copy whose ranks are on different hosts: its all-reduces cross the network every layer"),
}
