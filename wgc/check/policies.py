"""Chunk policies of streams: their parameters, validity rules and the chunk type a consumer sees."""

from __future__ import annotations

from dataclasses import dataclass

from wgc.check.context import Context
from wgc.check.types import WILDCARD, Ty
from wgc.diag.sink import did_you_mean
from wgc.lang import ast


@dataclass(frozen=True)
class PolicyRule:
    params: tuple[str, ...]
    minimum: dict[str, int]  # smallest legal value per parameter


POLICIES: dict[str, PolicyRule] = {
    "fixed": PolicyRule(("size",), {"size": 1}),
    "sliding": PolicyRule(("window", "stride"), {"window": 1, "stride": 1}),
    "left_context": PolicyRule(("left", "chunk"), {"left": 0, "chunk": 1}),
}
AT_END = ("flush", "pad", "drop")
AFTER_END = ("stop", "continue")


def policy_values(policy: ast.Policy) -> dict[str, int] | None:
    """Parameter name → value, positional arguments taken in declaration order."""
    rule = POLICIES.get(policy.name)
    if rule is None:
        return None
    values: dict[str, int] = {}
    for i, arg in enumerate(policy.args):
        values.setdefault(_arg_name(rule, i, arg), arg.value)
    return values


def _arg_name(rule: PolicyRule, i: int, arg: ast.PolicyArg) -> str:
    return arg.name if arg.name is not None else (rule.params[i] if i < len(rule.params) else f"#{i + 1}")


def check_policy(ctx: Context, s: ast.Stream) -> None:
    p = s.policy
    rule = POLICIES.get(p.name)
    if rule is None:
        ctx.error("E019", f"unknown chunk policy `{p.name}`", p.span,
                  did_you_mean(p.name, POLICIES) or ("policies: fixed(k), sliding(window, stride), left_context(left, chunk)",))
        return
    values = policy_values(p) or {}
    given: set[str] = set()
    for i, arg in enumerate(p.args):
        name, value = _arg_name(rule, i, arg), arg.value
        if name in given:
            ctx.error("E019", f"`{name}` of {p.name} is given twice", arg.span)
            continue
        given.add(name)
        if name not in rule.params:
            ctx.error("E019", f"`{p.name}` has no parameter `{name}`", arg.span,
                      (f"{p.name} takes: " + ", ".join(rule.params),))
        elif value < rule.minimum[name]:
            ctx.error("E019", f"`{name}` of {p.name} must be at least {rule.minimum[name]}, not {value}", arg.span)
    missing = [n for n in rule.params if n not in values]
    if missing:
        ctx.error("E019", f"{p.name} needs " + ", ".join(f"`{n}`" for n in missing), p.span,
                  (f"write {p.name}(" + ", ".join(f"{n}=..." for n in rule.params) + ")",))
    if p.name == "sliding" and values.get("stride", 0) > values.get("window", 0) > 0:
        ctx.error("E019", f"sliding window {values['window']} is smaller than its stride {values['stride']}: "
                  "items between windows would be skipped", p.span, ("use stride <= window",))
    if s.at_end is not None and s.at_end not in AT_END:
        ctx.error("E034", f"unknown at_end rule `{s.at_end}`", s.at_end_span or s.span,
                  did_you_mean(s.at_end, AT_END) or ("at_end rules: flush, pad, drop",))
    if s.after_end is not None and s.after_end not in AFTER_END:
        ctx.error("E034", f"unknown after_end rule `{s.after_end}`", s.after_end_span or s.span,
                  did_you_mean(s.after_end, AFTER_END) or ("after_end rules: stop, continue",))
    need = max(1, first_chunk_items(p.name, values))
    if s.capacity is not None and s.capacity < need:
        ctx.error("E019", f"capacity {s.capacity} cannot hold one chunk of {need} items: the producer would wait "
                  "forever for room", s.span, (f"use capacity {need} or more",))


def first_chunk_items(name: str, values: dict[str, int]) -> int:
    """The smallest capacity that lets a chunk form: items pushed and not yet consumed when the first
    chunk is ready. Capacity counts only those (docs/plan.md): a sliding window's overlap and a
    left_context's L items of context were consumed by the chunk before, so later chunks need no more
    (sliding: S new items; left_context: C)."""
    if name == "sliding":
        return values.get("window", 1)
    if name == "left_context":
        return values.get("chunk", 1)
    return values.get("size", 1)


def chunk_type(s: ast.Stream, item: Ty) -> Ty:
    """What one consumer firing (or one `recv`) receives from stream `s`."""
    values = policy_values(s.policy) or {}
    if s.policy.name == "fixed":
        size = values.get("size", 1)
        return item if size == 1 else item.with_leading(WILDCARD if final_may_be_short(s) else size)
    if s.policy.name == "sliding":
        window = values.get("window", 1)
        return item.with_leading(WILDCARD if final_may_be_short(s) else window)
    return item.with_leading(WILDCARD)


def final_may_be_short(s: ast.Stream) -> bool:
    """With `at_end flush` (the default) the last fragment is delivered as it is."""
    return (s.at_end or "flush") == "flush"
