"""Readers for placement values: each checks one TOML node and returns a Python value or None.

A reader never raises: on a bad value it records a diagnostic at the value's span and returns
None, so one run reports every problem. Each key of the schema (`spec.py`) names one of these
readers; a reader's messages are made from what it is given (the type wanted, the bounds, the
choices), never written per key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from wgc.diag.diagnostic import Diagnostic
from wgc.diag.sink import Sink, did_you_mean
from wgc.placement.document import Node, dotted
from wgc.placement.tables import MAX_INTEGER, MAX_RANKS, MAX_SECONDS, MAX_SIZE
from wgc.placement.units import fmt_bytes, parse_size

_RANGE = re.compile(r"\s*([0-9]+)\s*-\s*([0-9]+)\s*")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_KINDS = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", dict: "a table", tuple: "an array"}


class Ctx(Sink):
    """What readers share: the diagnostics so far (Sink) and the cluster's rank count (once known)."""

    def __init__(self, diagnostics: list[Diagnostic] | None = None, rank_count: int | None = None) -> None:
        super().__init__(diagnostics)
        self.rank_count = rank_count


Reader = Callable[[Node, Ctx], object]


def kind_of(value: object) -> str:
    return _KINDS.get(type(value), "a date or time")


def _key(node: Node) -> str:
    """How a message names the value: `` `max_batch`: `` (from its last key), or nothing at the top."""
    last = max((i for i, part in enumerate(node.path) if isinstance(part, str)), default=None)
    return f"`{dotted(node.path[last:])}`: " if last is not None else ""


def _wrong(node: Node, ctx: Ctx, want: str) -> None:
    ctx.error("P003", f"{_key(node)}expected {want}, found {kind_of(node.value)}", node.span)


def typed(want: str, accept: Callable[[object], bool], convert: Callable[[object], object] = lambda v: v) -> Reader:
    """A value of one TOML type, else P003 naming the type wanted."""
    return lambda node, ctx: convert(node.value) if accept(node.value) else _wrong(node, ctx, want)


string = typed("a string", lambda v: isinstance(v, str))
boolean = typed("a boolean (true or false)", lambda v: isinstance(v, bool))
number = typed("a number", lambda v: isinstance(v, int | float) and not isinstance(v, bool), float)


def choice(options: Mapping[str, object] | tuple[str, ...], what: str) -> Reader:
    def read(node: Node, ctx: Ctx) -> str | None:
        value = string(node, ctx)
        if value is None or value in options:
            return value
        listed = ", ".join(f'"{o}"' for o in options)
        ctx.error("P003", f'unknown {what} "{value}" (one of {listed})', node.span, did_you_mean(value, options))
        return None

    return read


def integer(lo: int = 0, hi: int | None = None) -> Reader:
    """An integer in lo..hi; without `hi`, at most MAX_INTEGER (2**53), so none can overflow."""
    bound = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
    top = MAX_INTEGER if hi is None else hi

    def read(node: Node, ctx: Ctx) -> int | None:
        if type(node.value) is not int:
            return _wrong(node, ctx, f"an integer {bound}")
        if lo <= node.value <= top:
            return node.value
        shown = f"{bound} and at most {top:,}" if hi is None and node.value > top else bound
        ctx.error("P003", f"{_key(node)}{_number(node.value)} is out of range: expected an integer {shown}", node.span)
        return None

    return read


def seconds(node: Node, ctx: Ctx) -> float | None:
    """A duration in seconds: a number above 0 and at most MAX_SECONDS (a day)."""
    value = node.value
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= MAX_SECONDS:
        return float(value)
    ctx.error("P003", f"`{node.path[-1]}`: expected seconds, a number above 0 and at most {MAX_SECONDS:g}, found "
              f"{value!r}"[:200], node.span)
    return None


def _number(value: int) -> str:
    """An integer as a message shows it: in full up to 30 digits, else its digit count."""
    text = str(value)
    return text if len(text) <= 30 else f"{text[:6]}... ({len(text)} digits)"


def size(node: Node, ctx: Ctx) -> int | None:
    """`"80GiB"`, `"512 MB"`, or a plain integer count of bytes; at most MAX_SIZE (64 TiB)."""
    text = node.value
    if type(text) is int and text > 0:
        value, shown = text, f"{_number(text)} B"
    elif not isinstance(text, str):
        return _wrong(node, ctx, 'a size such as "80GiB"')
    else:
        value, reason = parse_size(text)
        if value is None or value <= 0:
            ctx.error("P003", reason or "a size must be more than zero", node.span)
            return None
        shown = text if len(text) <= 30 else f"{text[:12]}...{text[-6:]}"
    if value > MAX_SIZE:
        ctx.error("P003", f"{_key(node)}{shown} is more than any rank can hold: sizes go up to {fmt_bytes(MAX_SIZE)}",
                  node.span)
        return None
    return value


def int_list(lo: int = 1, hi: int | None = None) -> Reader:
    element = integer(lo, hi)

    def read(node: Node, ctx: Ctx) -> tuple[int, ...] | None:
        if not node.is_array:
            return _wrong(node, ctx, "an array of integers")
        values = [element(n, ctx) for n in node.elements()]
        ints = tuple(v for v in values if isinstance(v, int))
        return ints if len(ints) == len(values) else None

    return read


def module_list(node: Node, ctx: Ctx) -> tuple[str, ...] | None:
    """An array of module prefixes: dotted Python names such as `"mypkg.models"`."""
    if not node.is_array:
        return _wrong(node, ctx, 'an array of module names such as ["mypkg.models"]')
    out = []
    for n in node.elements():
        if not (isinstance(n.value, str) and _MODULE.fullmatch(n.value)):
            shown = repr(n.value) if isinstance(n.value, str) else kind_of(n.value)
            ctx.error("P003", f"a module prefix is a dotted Python name such as \"mypkg.models\", found {shown}", n.span)
            return None
        out.append(n.value)
    return tuple(out)


def rank_set(node: Node, ctx: Ctx) -> tuple[int, ...] | None:
    """A rank (`1`), a list (`[0, 2]`) or an inclusive range (`"0-7"`); checked against the cluster."""
    value, count = node.value, ctx.rank_count
    if type(value) is int:
        ranks = [(value, node)]
    elif node.is_array:
        ranks = [(n.value, n) for n in node.elements()]
    elif isinstance(value, str) and (m := _RANGE.fullmatch(value)):
        lo, hi = int(m.group(1)), int(m.group(2))
        if hi < lo:
            ctx.error("P003", f'empty rank range "{value}": the first rank is above the last', node.span)
            return None
        limit = MAX_RANKS if count is None else count
        if hi >= limit:  # before the range is spelled out: "0-99999999999" would fill memory
            ctx.error("P012", f'rank range "{value}" is out of range: the cluster has ranks 0..{limit - 1}', node.span,
                      (f"cluster.ranks is {count}" if count else f"a cluster has at most {MAX_RANKS} ranks",))
            return None
        ranks = [(r, node) for r in range(lo, hi + 1)]
    else:
        return _wrong(node, ctx, 'a rank, a list of ranks or a range such as "0-7"')
    if not ranks:
        ctx.error("P003", "a rank list needs at least one rank", node.span)
        return None
    ok, seen = True, set()
    for rank, at in ranks:  # every problem reported; a rank out of range still counts as listed
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            ctx.error("P003", f"a rank is an integer from 0, found {rank!r}", at.span)
        elif rank in seen:
            ctx.error("P003", f"rank {rank} is listed twice", at.span)
        elif count is not None and rank >= count:
            ctx.error("P012", f"rank {rank} is out of range: the cluster has ranks 0..{count - 1}", at.span,
                      (f"cluster.ranks is {count}",))
            seen.add(rank)
        else:
            seen.add(rank)
            continue
        ok = False
    return tuple(r for r, _ in ranks) if ok else None
