"""Grammar rules → AST nodes, wired by rule name (one method per rule or alias).

The builder is a lark Transformer over the parse tree: each method gets the rule's `meta` (lark's
positions, `propagate_positions`) and its children. The file name for spans comes from a context
variable set by `parse`.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from wgc.lang import ast
from wgc.lang.span import Span
from wgc.lang.walk_parser import Meta, Token, Transformer, v_args

current_file: ContextVar[str] = ContextVar("wgc_current_file", default="<input>")

_SIZE_SUFFIX = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def _span(meta: Meta) -> Span:
    if meta.empty:  # a rule that matched no tokens (an empty program)
        return Span(current_file.get(), 1, 1, 1, 1)
    return Span(current_file.get(), meta.line, meta.column, meta.end_line, meta.end_column)


def _tok_span(tok: Token) -> Span:
    return Span(current_file.get(), tok.line, tok.column, tok.end_line, tok.end_column)


def _unquote(text: str) -> str:
    body = text[1:-1]
    if "\\" not in body:
        return body
    out, i = [], 0
    escapes = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            out.append(escapes.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class _Tagged:
    """An intermediate value for a clause that is folded into its parent node."""

    tag: str
    value: Any
    span: Span


@v_args(meta=True)
class AstBuilder(Transformer):
    """`rule(meta, children)` for every rule, `meta` its positions; each returns a node.

    A rule without a method here would silently build a lark Tree; the test
    suite parses every construct, and the checker rejects any stray Tree.
    """

    # ---- program and declarations -----------------------------------------

    def start(self, meta, c):
        return ast.Program(_span(meta), tuple(c))

    def model_decl(self, meta, c):
        return ast.Model(_span(meta), str(c[0]))

    def import_decl(self, meta, c):
        return ast.Import(_span(meta), c[0], str(c[1]))

    def dotted_name(self, meta, c):
        return tuple(str(t) for t in c)

    def param_decl(self, meta, c):
        name, type_, default, bounds = c
        rng = bounds.value if bounds is not None and bounds.tag == "range" else None
        choices = bounds.value if bounds is not None and bounds.tag == "choice" else None
        return ast.Param(_span(meta), str(name), str(type_), default, rng, choices)

    def range_bounds(self, meta, c):
        return _Tagged("range", (c[0], c[1]), _span(meta))

    def choice_bounds(self, meta, c):
        return _Tagged("choice", tuple(c), _span(meta))

    def component_decl(self, meta, c):
        return ast.Component(_span(meta), str(c[0]), c[1], str(c[2]), tuple(c[3:]))

    def entry_decl(self, meta, c):
        return ast.Entry(_span(meta), str(c[0]), c[1] or (), c[2])

    def arg_list(self, meta, c):
        return tuple(c)

    def arg_decl(self, meta, c):
        return ast.Arg(_span(meta), str(c[0]), c[1])

    def const_decl(self, meta, c):
        return ast.Const(_span(meta), str(c[0]), c[1], c[2])

    def labels_decl(self, meta, c):
        return ast.Labels(_span(meta), tuple(str(t) for t in c))

    def attr_decl(self, meta, c):
        return ast.Attr(_span(meta), str(c[0]), c[1])

    def name_value(self, meta, c):
        return ast.Name(_span(meta), str(c[0]))

    # ---- types ---------------------------------------------------------------

    def type(self, meta, c):
        name, args, dtype = c
        return ast.TypeRef(
            _span(meta), str(name), args or (), str(dtype) if dtype is not None else None, args is not None
        )

    def type_args(self, meta, c):
        return tuple(c)

    def dim_int(self, meta, c):
        return ast.DimInt(_span(meta), int(c[0]))

    # ---- streams -------------------------------------------------------------

    def stream_decl(self, meta, c):
        name, type_, producer, consumer, policy, *opts = c
        found = {o.tag: o for o in opts}
        at_end, after_end, cap = found.get("at_end"), found.get("after_end"), found.get("capacity")
        return ast.Stream(
            _span(meta),
            str(name),
            type_,
            str(producer),
            str(consumer),
            policy,
            at_end.value if at_end else None,
            after_end.value if after_end else None,
            cap.value if cap else None,
            at_end.span if at_end else None,
            after_end.span if after_end else None,
        )

    def policy(self, meta, c):
        return ast.Policy(_span(meta), str(c[0]), c[1] or ())

    def policy_args(self, meta, c):
        return tuple(c)

    def policy_arg(self, meta, c):
        return ast.PolicyArg(_span(meta), str(c[0]) if c[0] is not None else None, int(c[1]))

    def at_end(self, meta, c):
        return _Tagged("at_end", str(c[0]), _span(meta))

    def after_end(self, meta, c):
        return _Tagged("after_end", str(c[0]), _span(meta))

    def capacity(self, meta, c):
        return _Tagged("capacity", int(c[0]), _span(meta))

    # ---- walks and statements ------------------------------------------------

    def walk_decl(self, meta, c):
        name, args, returns, on, *body = c
        return ast.Walk(
            _span(meta),
            str(name),
            args or (),
            returns,
            on.value if on else None,
            tuple(body),
            on.span if on else None,
        )

    def walk_on(self, meta, c):
        return _Tagged("on", str(c[0]), _span(meta))

    def assign(self, meta, c):
        return ast.Assign(_span(meta), str(c[0]), c[1])

    def send(self, meta, c):
        return ast.Send(_span(meta), c[0], str(c[1]))

    def emit(self, meta, c):
        return ast.Emit(_span(meta), str(c[0]), c[1])

    def fork(self, meta, c):
        return ast.Fork(_span(meta), str(c[0]), str(c[1]))

    def return_stmt(self, meta, c):
        return ast.Return(_span(meta), c[0])

    def expr_stmt(self, meta, c):
        comp, entry, args = c
        span = _span(meta)
        func = ast.Attribute(
            Span(span.file, comp.line, comp.column, entry.end_line, entry.end_column),
            ast.Name(_tok_span(comp), str(comp)),
            str(entry),
        )
        positional, keywords = _split_args(args or ())
        return ast.ExprStmt(span, ast.Call(span, func, positional, keywords))

    def loop(self, meta, c):
        bound, *rest = c
        yields = rest.pop() if rest else None
        opts = [r for r in rest if isinstance(r, (_Tagged, ast.Carry))]
        body = tuple(r for r in rest if not isinstance(r, (_Tagged, ast.Carry)))
        index = next((o.value for o in opts if isinstance(o, _Tagged) and o.tag == "index"), None)
        nospec = any(isinstance(o, _Tagged) and o.tag == "nospec" for o in opts)
        carries = tuple(o for o in opts if isinstance(o, ast.Carry))
        until, max_ = (bound.value if bound.tag == "until" else (None, bound.value))
        return ast.Loop(_span(meta), max_, until, index, carries, nospec, body, yields or ())

    def fixed_bound(self, meta, c):
        return _Tagged("fixed", c[0], _span(meta))

    def until_bound(self, meta, c):
        return _Tagged("until", (c[0], c[1]), _span(meta))

    def loop_index(self, meta, c):
        return _Tagged("index", str(c[0]), _span(meta))

    def carry(self, meta, c):
        return ast.Carry(_span(meta), str(c[0]), c[1])

    def nospec(self, meta, c):
        return _Tagged("nospec", True, _span(meta))

    def yields(self, meta, c):
        return tuple(c)

    def terminal(self, meta, c):
        return ast.YieldItem(_span(meta), "terminal", str(c[0]))

    def accumulated(self, meta, c):
        return ast.YieldItem(_span(meta), "accumulated", str(c[0]), str(c[1]) if c[1] is not None else None)

    def parallel(self, meta, c):
        branches = []
        for item in c:
            if isinstance(item, ast.Branch):
                branches.append(item)
            else:
                name = item.target if isinstance(item, ast.Assign) else ""
                branches.append(ast.Branch(item.span, name, (item,), False))
        return ast.Parallel(_span(meta), tuple(branches))

    def branch(self, meta, c):
        return ast.Branch(_span(meta), str(c[0]), tuple(c[1:]), True)

    # ---- expressions ---------------------------------------------------------

    def or_op(self, meta, c):
        return ast.Binary(_span(meta), "or", c[0], c[1])

    def and_op(self, meta, c):
        return ast.Binary(_span(meta), "and", c[0], c[1])

    def not_op(self, meta, c):
        return ast.Unary(_span(meta), "not", c[0])

    def compare(self, meta, c):
        return ast.Binary(_span(meta), str(c[1]), c[0], c[2])

    def contains(self, meta, c):
        return ast.Binary(_span(meta), "in", c[0], c[1])

    def add(self, meta, c):
        return ast.Binary(_span(meta), "+", c[0], c[1])

    def subtract(self, meta, c):
        return ast.Binary(_span(meta), "-", c[0], c[1])

    def multiply(self, meta, c):
        return ast.Binary(_span(meta), str(c[1]), c[0], c[2])

    def negate(self, meta, c):
        return ast.Unary(_span(meta), "-", c[0])

    def attribute(self, meta, c):
        return ast.Attribute(_span(meta), c[0], str(c[1]))

    def index(self, meta, c):
        return ast.Index(_span(meta), c[0], c[1])

    def call(self, meta, c):
        positional, keywords = _split_args(c[1] or ())
        return ast.Call(_span(meta), c[0], positional, keywords)

    def call_args(self, meta, c):
        return tuple(c)

    def keyword_arg(self, meta, c):
        return ast.KeywordArg(_span(meta), str(c[0]), c[1])

    def name(self, meta, c):
        return ast.Name(_span(meta), str(c[0]))

    def recv(self, meta, c):
        return ast.Recv(_span(meta), str(c[0]))

    def int_lit(self, meta, c):
        return ast.IntLit(_span(meta), int(c[0]))

    def neg_int_lit(self, meta, c):
        return ast.IntLit(_span(meta), -int(c[0]))

    def float_lit(self, meta, c):
        return ast.FloatLit(_span(meta), float(c[0]), str(c[0]))

    def neg_float_lit(self, meta, c):
        return ast.FloatLit(_span(meta), -float(c[0]), "-" + str(c[0]))

    def size_lit(self, meta, c):
        text = str(c[0])
        # Exact arithmetic: a float would overflow on a long literal (and round 7.2B imprecisely).
        return ast.SizeLit(_span(meta), round(Fraction(text[:-1]) * _SIZE_SUFFIX[text[-1]]), text)

    def string_lit(self, meta, c):
        return ast.StrLit(_span(meta), _unquote(str(c[0])))

    def true_lit(self, meta, c):
        return ast.BoolLit(_span(meta), True)

    def false_lit(self, meta, c):
        return ast.BoolLit(_span(meta), False)

    # ---- flows ---------------------------------------------------------------

    def flow_decl(self, meta, c):
        name, when, *items = c
        return ast.Flow(_span(meta), str(name) if name is not None else None, when, tuple(items))

    def chain(self, meta, c):
        return ast.Chain(_span(meta), tuple(c[:-1]), c[-1])

    def flow_start(self, meta, c):
        return ast.FlowNode(_span(meta), "start")

    def flow_done(self, meta, c):
        return ast.FlowNode(_span(meta), "done")

    def flow_walk(self, meta, c):
        return ast.FlowNode(_span(meta), str(c[0]))

    def each(self, meta, c):
        return ast.Each(_span(meta), str(c[0]), str(c[1]), c[2], tuple(c[3:]))

    def each_arm(self, meta, c):
        kind, *walks, when = c
        nodes = tuple(ast.FlowNode(_tok_span(w), str(w)) for w in walks)
        return ast.EachArm(_span(meta), str(kind), nodes, when)


def _split_args(items: tuple) -> tuple[tuple, tuple]:
    positional = tuple(a for a in items if not isinstance(a, ast.KeywordArg))
    keywords = tuple(a for a in items if isinstance(a, ast.KeywordArg))
    return positional, keywords
