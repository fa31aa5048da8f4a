"""The text of cluster and edge labels, in the program's own (canonical) spelling."""

from __future__ import annotations

from wgc.fmt.expr import format_expr, format_type
from wgc.fmt.lines import HEADER_TEXT, loop_tail
from wgc.lang import ast

DEFAULT_AT_END = "flush"


def walk_lines(w: ast.Walk) -> tuple[str, ...]:
    """`walk snac_chunk(chunk: token[28]) on codes`."""
    return (HEADER_TEXT[ast.Walk](w),)


def loop_lines(lp: ast.Loop) -> tuple[str, ...]:
    """`loop steps - 1 as i carry z` / `loop until … max N … nospec`, then its yields."""
    tail = loop_tail(lp).strip()
    return (HEADER_TEXT[ast.Loop](lp),) + ((tail,) if tail else ())


def arg_lines(a: ast.Arg) -> tuple[str, ...]:
    return (f"{a.name}: {format_type(a.type)}",)


def call_line(component: str, entry: str, label: str | None) -> str:
    return f"{component}.{entry}" + (f" [{label}]" if label else "")


def policy_text(p: ast.Policy) -> str:
    args = ", ".join(str(a.value) if a.name is None else f"{a.name}={a.value}" for a in p.args)
    return f"{p.name}({args})"


def stream_label(s: ast.Stream) -> str:
    """`codes: sliding(window=28, stride=7) at_end drop` (at_end always; the rest when written)."""
    text = f"{s.name}: {policy_text(s.policy)} at_end {s.at_end or DEFAULT_AT_END}"
    if s.after_end:
        text += f" after_end {s.after_end}"
    if s.capacity is not None:
        text += f" capacity {s.capacity}"
    return text


def flow_lines(f: ast.Flow) -> tuple[str, ...]:
    return (HEADER_TEXT[ast.Flow](f),)


def each_lines(e: ast.Each) -> tuple[str, ...]:
    return (HEADER_TEXT[ast.Each](e),)


def condition(cond: ast.Expr | None) -> str | None:
    return format_expr(cond) if cond is not None else None
