"""The parser: every construct becomes the expected AST nodes and fields, and spans point at the right
place (the generated tables themselves: test_walk_parser.py)."""

from __future__ import annotations

import pytest

from wgc.lang import ast
from wgc.lang.parser import parse
from wgc.lang.span import Span

_ = Span("<test>", 0, 0, 0, 0)  # spans never take part in equality


def program(source: str) -> ast.Program:
    result = parse(source, "t.walk")
    assert result.diagnostics == (), [f"{d.span}: {d.message}" for d in result.diagnostics]
    assert result.program is not None
    return result.program


def only(source: str, kind: type):
    decls = program(source).of(kind)
    assert len(decls) == 1
    return decls[0]


def body(statements: str) -> tuple[ast.Stmt, ...]:
    return only(f"model m\nwalk w() {{\n{statements}\n}}\n", ast.Walk).body


def expr(text: str) -> ast.Expr:
    (stmt,) = body(f"x = {text}")
    assert isinstance(stmt, ast.Assign)
    return stmt.value


# Shorthands for expected trees.
def N(name: str) -> ast.Name:
    return ast.Name(_, name)


def I(value: int) -> ast.IntLit:  # noqa: E743
    return ast.IntLit(_, value)


def B(op: str, left: ast.Expr, right: ast.Expr) -> ast.Binary:
    return ast.Binary(_, op, left, right)


def A(base: ast.Expr, attr: str) -> ast.Attribute:
    return ast.Attribute(_, base, attr)


def T(name: str, *args, dtype: str | None = None) -> ast.TypeRef:
    return ast.TypeRef(_, name, tuple(ast.DimInt(_, a) if isinstance(a, int) else a for a in args), dtype, bool(args))


def call(comp: str, entry: str, *args: ast.Expr, **kwargs: ast.Expr) -> ast.Call:
    return ast.Call(_, A(N(comp), entry), args, tuple(ast.KeywordArg(_, k, v) for k, v in kwargs.items()))


# ---- declarations -------------------------------------------------------------------------------


def test_model_and_import() -> None:
    p = program("model bagel\nimport wgc.models.bagel as bagel\n")
    assert p.decls == (ast.Model(_, "bagel"), ast.Import(_, ("wgc", "models", "bagel"), "bagel"))


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("param seed: int", ast.Param(_, "seed", "int", None)),
        ("param think: bool = false", ast.Param(_, "think", "bool", ast.BoolLit(_, False))),
        ("param steps: int = 50 in 2..200", ast.Param(_, "steps", "int", I(50), (I(2), I(200)))),
        (
            "param shift: float = -1.5 in -2.0..2.0",
            ast.Param(_, "shift", "float", ast.FloatLit(_, -1.5, "-1.5"),
                      (ast.FloatLit(_, -2.0, "-2.0"), ast.FloatLit(_, 2.0, "2.0"))),
        ),
        ("param low: int = -3", ast.Param(_, "low", "int", I(-3))),
        (
            'param voice: str = "tara" in ["tara", "leah"]',
            ast.Param(_, "voice", "str", ast.StrLit(_, "tara"), None, (ast.StrLit(_, "tara"), ast.StrLit(_, "leah"))),
        ),
    ],
)
def test_params(text: str, want: ast.Param) -> None:
    assert only(f"model m\n{text}\n", ast.Param) == want


def test_component_members() -> None:
    c = only(
        """model m
        import wgc.models.llama as llama
        component llm: llama.Llama engine kv {
            prefill(prompt: text)
            decode(prev: token, temperature: scalar) -> token
            const eos: token = 128258
            const pad: token
            labels main, cfg_text, cfg_img
            weights = 7.2B
            dtype = bf16
            kv_layers = 28
        }
        """,
        ast.Component,
    )
    assert (c.name, c.cls, c.engine) == ("llm", ("llama", "Llama"), "kv")
    assert c.entries() == (
        ast.Entry(_, "prefill", (ast.Arg(_, "prompt", T("text")),), None),
        ast.Entry(_, "decode", (ast.Arg(_, "prev", T("token")), ast.Arg(_, "temperature", T("scalar"))), T("token")),
    )
    assert c.consts() == (ast.Const(_, "eos", T("token"), I(128258)), ast.Const(_, "pad", T("token"), None))
    assert c.labels() == ("main", "cfg_text", "cfg_img")
    assert c.attrs() == (
        ast.Attr(_, "weights", ast.SizeLit(_, 7_200_000_000, "7.2B")),
        ast.Attr(_, "dtype", N("bf16")),
        ast.Attr(_, "kv_layers", I(28)),
    )


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("tokens", T("tokens")),
        ("token", T("token")),
        ("token[16]", T("token", 16)),
        ("token[_, 16]", T("token", T("_"), 16)),
        ("tensor[N, 64; bf16]", T("tensor", T("N"), 64, dtype="bf16")),
        ("seq[token[16]]", T("seq", T("token", 16))),
        ("action[50, 32]", T("action", 50, 32)),
    ],
)
def test_types(text: str, want: ast.TypeRef) -> None:
    walk = only(f"model m\nwalk w(x: {text}) -> {text} {{ }}\n", ast.Walk)
    assert walk.args[0].type == want
    assert walk.returns == want


@pytest.mark.parametrize(
    ("policy", "name", "args"),
    [
        ("fixed(4)", "fixed", ((None, 4),)),
        ("fixed(size=4)", "fixed", (("size", 4),)),
        ("sliding(window=28, stride=7)", "sliding", (("window", 28), ("stride", 7))),
        ("sliding(28, 7)", "sliding", ((None, 28), (None, 7))),
        ("left_context(left=25, chunk=25)", "left_context", (("left", 25), ("chunk", 25))),
        ("fixd(1)", "fixd", ((None, 1),)),  # policy names are checked by the checker, not the grammar
    ],
)
def test_stream_policies(policy: str, name: str, args: tuple) -> None:
    s = only(f"model m\nstream s: token[16] from talker to code2wav {policy}\n", ast.Stream)
    assert s.policy == ast.Policy(_, name, tuple(ast.PolicyArg(_, k, v) for k, v in args))
    assert (s.name, s.type, s.producer, s.consumer) == ("s", T("token", 16), "talker", "code2wav")
    assert (s.at_end, s.after_end, s.capacity) == (None, None, None)


def test_stream_options_in_any_order() -> None:
    a = only("model m\nstream s: token from a to b fixed(1) at_end pad after_end continue capacity 256\n", ast.Stream)
    b = only("model m\nstream s: token from a to b fixed(1) capacity 256 after_end continue at_end pad\n", ast.Stream)
    assert a == b
    assert (a.at_end, a.after_end, a.capacity) == ("pad", "continue", 256)


def test_walk_signature() -> None:
    w = only("model m\nwalk speak(chunk: token[_, 16]) -> audio on frames { }\n", ast.Walk)
    assert w == ast.Walk(_, "speak", (ast.Arg(_, "chunk", T("token", T("_"), 16)),), T("audio"), "frames", ())
    bare = only("model m\nwalk go() { }\n", ast.Walk)
    assert (bare.args, bare.returns, bare.on, bare.body) == ((), None, None, ())


# ---- statements ---------------------------------------------------------------------------------


def test_simple_statements() -> None:
    stmts = body(
        """
        tok = llm.decode(prev, temperature=0.7)
        llm.prefill(prompt, cache=main)
        send tok -> codes
        emit text tok
        fork cfg_text from main
        return tok
        """
    )
    assert stmts == (
        ast.Assign(_, "tok", call("llm", "decode", N("prev"), temperature=ast.FloatLit(_, 0.7, "0.7"))),
        ast.ExprStmt(_, call("llm", "prefill", N("prompt"), cache=N("main"))),
        ast.Send(_, N("tok"), "codes"),
        ast.Emit(_, "text", N("tok")),
        ast.Fork(_, "cfg_text", "main"),
        ast.Return(_, N("tok")),
    )


def test_fixed_loop_with_every_option() -> None:
    (loop,) = body(
        """
        loop steps - 1 as t carry z carry v = x nospec {
            z = llm.step(z)
        } yield terminal z, accumulated v as vs
        """
    )
    assert loop == ast.Loop(
        _,
        bound=B("-", N("steps"), I(1)),
        until=None,
        index="t",
        carries=(ast.Carry(_, "z", None), ast.Carry(_, "v", N("x"))),
        nospec=True,
        body=(ast.Assign(_, "z", call("llm", "step", N("z"))),),
        yields=(ast.YieldItem(_, "terminal", "z"), ast.YieldItem(_, "accumulated", "v", "vs")),
    )
    assert not loop.dynamic
    assert loop.yields[1].exposed == "vs" and loop.yields[0].exposed == "z"


def test_dynamic_loop() -> None:
    (loop,) = body(
        """
        loop until tok == llm.eos max max_tokens - 1 nospec carry tok = first as i {
            tok = llm.decode(tok)
        }
        """
    )
    assert loop.dynamic
    assert loop.until == B("==", N("tok"), A(N("llm"), "eos"))
    assert loop.bound == B("-", N("max_tokens"), I(1))
    assert (loop.index, loop.nospec, loop.carries) == ("i", True, (ast.Carry(_, "tok", N("first")),))
    assert loop.yields == ()


def test_dynamic_loop_without_max_parses_with_no_bound() -> None:
    (loop,) = body("loop until done_ { x = 1 }")
    assert loop.dynamic and loop.bound is None  # the checker reports E017


def test_parallel_branches_and_bare_statements() -> None:
    (par,) = body(
        """
        parallel {
            branch main {
                v_main = llm.velocity(z, t, cache=main)
                w = v_main
            }
            v_img = llm.velocity(z, t, cache=cfg_img)
            llm.tick()
        }
        """
    )
    assert par == ast.Parallel(
        _,
        (
            ast.Branch(_, "main", (
                ast.Assign(_, "v_main", call("llm", "velocity", N("z"), N("t"), cache=N("main"))),
                ast.Assign(_, "w", N("v_main")),
            ), True),
            ast.Branch(_, "v_img", (ast.Assign(_, "v_img", call("llm", "velocity", N("z"), N("t"), cache=N("cfg_img"))),),
                       False),
            ast.Branch(_, "", (ast.ExprStmt(_, call("llm", "tick")),), False),
        ),
    )


def test_nested_blocks() -> None:
    (outer,) = body("loop 2 { parallel { branch a { loop 3 { x = 1 } } } }")
    (par,) = outer.body
    (branch,) = par.branches
    (inner,) = branch.body
    assert isinstance(inner, ast.Loop) and inner.bound == I(3)


# ---- expressions --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("a + b * c - d", B("-", B("+", N("a"), B("*", N("b"), N("c"))), N("d"))),
        ("a / b % c", B("%", B("/", N("a"), N("b")), N("c"))),
        ("(a + b) * c", B("*", B("+", N("a"), N("b")), N("c"))),
        ("a or b and not c == d", B("or", N("a"), B("and", N("b"), ast.Unary(_, "not", B("==", N("c"), N("d")))))),
        ("not a and b", B("and", ast.Unary(_, "not", N("a")), N("b"))),
        ('"image" in request.outputs', B("in", ast.StrLit(_, "image"), A(N("request"), "outputs"))),
        ("t + 1 >= horizon", B(">=", B("+", N("t"), I(1)), N("horizon"))),
        ("-x[0]", ast.Unary(_, "-", ast.Index(_, N("x"), I(0)))),
        ("- -x", ast.Unary(_, "-", ast.Unary(_, "-", N("x")))),
        ("actions[t][0]", ast.Index(_, ast.Index(_, N("actions"), N("t")), I(0))),
        ("frame[0] != talker.codec_eos", B("!=", ast.Index(_, N("frame"), I(0)), A(N("talker"), "codec_eos"))),
        ("1.0 - k / 10", B("-", ast.FloatLit(_, 1.0, "1.0"), B("/", N("k"), I(10)))),
        ("recv hidden", ast.Recv(_, "hidden")),
        ("llm.f(recv hidden, n=2)", call("llm", "f", ast.Recv(_, "hidden"), n=I(2))),
        ("1e-3", ast.FloatLit(_, 1e-3, "1e-3")),
        ("2.5e3", ast.FloatLit(_, 2500.0, "2.5e3")),
        ("650M", ast.SizeLit(_, 650_000_000, "650M")),
        ("3K", ast.SizeLit(_, 3000, "3K")),
        ('"say \\"hi\\"\\n"', ast.StrLit(_, 'say "hi"\n')),
        ("true", ast.BoolLit(_, True)),
        ("false", ast.BoolLit(_, False)),
    ],
)
def test_expressions(text: str, want: ast.Expr) -> None:
    assert expr(text) == want


def test_keywords_are_contextual() -> None:
    # docs/language.md: `text`, `image`, `start` or `done` are ordinary value names inside a walk body.
    stmts = body("text = 1\nimage = text\nstart = image\ndone = start")
    assert [s.target for s in stmts] == ["text", "image", "start", "done"]


# Words that are keywords only in flows and loop headers. As value names they must work after any
# statement, not only as the first one (after `x = y` the LALR state is shared with flow conditions
# and loop bounds, where these words may follow an expression). `and`, `or` and `in` are not here:
# after an expression they can only be the operators. Declaration keywords are reserved (below).
CONTEXTUAL = ["start", "done", "each", "max", "carry", "when", "until", "terminal", "accumulated", "from", "to", "on"]
DECLARATION_WORDS = ["model", "import", "param", "component", "stream", "walk", "flow"]


@pytest.mark.parametrize("word", CONTEXTUAL)
def test_contextual_keyword_as_a_value_name_after_a_statement(word: str) -> None:
    for before in ("x = y", "x = 1", "x = llm.f(y)"):
        source = f"model m\nwalk w() {{\n{before}\n{word} = x\nemit text {word}\n}}\n"
        result = parse(source, "t.walk")
        assert result.program is not None, f"after `{before}`: {result.diagnostics[0].message}"
        stmts = result.program.of(ast.Walk)[0].body
        assert [type(s) for s in stmts] == [ast.Assign, ast.Assign, ast.Emit]
        assert stmts[1].target == word


@pytest.mark.parametrize("word", DECLARATION_WORDS)
def test_declaration_keywords_are_reserved_with_a_clear_message(word: str) -> None:
    # Reserved so that a block left open before the next declaration is diagnosed as such.
    result = parse(f"model m\nwalk w() {{\nx = y\n{word} = x\n}}\n", "t.walk")
    assert result.program is None
    diag = result.diagnostics[0]
    assert (diag.code, diag.span.line, diag.span.column) == ("E001", 4, 1)
    assert any("closing `}`" in h or "reserved" in h for h in diag.help)


# ---- flows --------------------------------------------------------------------------------------


def test_flow_chains_conditions_and_each_blocks() -> None:
    flow = only(
        """model m
        flow main when "audio" in request.outputs {
            start -> prompt
            each prompt: part in request.parts {
                text -> prefill_text
                image -> prefill_vae -> prefill_vit when "image" in request.outputs
                _ -> prefill_vit when part.kind == "image"
            }
            prompt -> decode -> done when not think
            decode -> done
        }
        """,
        ast.Flow,
    )
    node = lambda name: ast.FlowNode(_, name)  # noqa: E731
    assert flow.name == "main"
    assert flow.when == B("in", ast.StrLit(_, "audio"), A(N("request"), "outputs"))
    start, each, chain, last = flow.items
    assert start == ast.Chain(_, (node("start"), node("prompt")), None)
    assert each == ast.Each(
        _, "prompt", "part", A(N("request"), "parts"),
        (
            ast.EachArm(_, "text", (node("prefill_text"),), None),
            ast.EachArm(_, "image", (node("prefill_vae"), node("prefill_vit")),
                        B("in", ast.StrLit(_, "image"), A(N("request"), "outputs"))),
            ast.EachArm(_, "_", (node("prefill_vit"),), B("==", A(N("part"), "kind"), ast.StrLit(_, "image"))),
        ),
    )
    assert chain == ast.Chain(_, (node("prompt"), node("decode"), node("done")), ast.Unary(_, "not", N("think")))
    assert last == ast.Chain(_, (node("decode"), node("done")), None)


def test_anonymous_flow() -> None:
    flow = only("model m\nflow { start -> a -> done }\n", ast.Flow)
    assert (flow.name, flow.when, len(flow.items)) == (None, None, 1)


# ---- comments, layout and spans -----------------------------------------------------------------

SPANNED = """model m
walk gen(first: token) -> token {
    tok = llm.decode(first, cache=main)  # sample
    send tok -> speech
    return tok
}
stream speech: token from llm to voc fixed(4) at_end pad after_end stop
walk say(c: token[4]) on speech { }
flow {
    start -> gen -> done when gen.result == llm.eos
    each p: part in request.parts { text -> gen }
}
"""


def test_spans_point_at_the_source() -> None:
    result = parse(SPANNED, "s.walk")
    p = result.program
    assert p is not None
    gen, say = p.of(ast.Walk)
    assert gen.span == Span("s.walk", 2, 1, 6, 2)
    assert gen.args[0].span == Span("s.walk", 2, 10, 2, 22)
    assert gen.returns.span == Span("s.walk", 2, 27, 2, 32)
    assign, send, ret = gen.body
    assert assign.span == Span("s.walk", 3, 5, 3, 40)
    assert assign.value.span == Span("s.walk", 3, 11, 3, 40)
    assert assign.value.func.span == Span("s.walk", 3, 11, 3, 21)
    assert assign.value.args[0].span == Span("s.walk", 3, 22, 3, 27)
    assert assign.value.kwargs[0].span == Span("s.walk", 3, 29, 3, 39)
    assert send.span == Span("s.walk", 4, 5, 4, 23)
    assert ret.span == Span("s.walk", 5, 5, 5, 15)
    (stream,) = p.of(ast.Stream)
    assert stream.span == Span("s.walk", 7, 1, 7, 72)
    assert stream.policy.span == Span("s.walk", 7, 38, 7, 46)
    assert stream.at_end_span == Span("s.walk", 7, 47, 7, 57)
    assert stream.after_end_span == Span("s.walk", 7, 58, 7, 72)
    assert say.on_span == Span("s.walk", 8, 23, 8, 32)
    (flow,) = p.of(ast.Flow)
    chain, each = flow.items
    assert chain.span.line == 10 and chain.span.column == 5
    assert [n.span.column for n in chain.nodes] == [5, 14, 21]
    assert chain.when.span == Span("s.walk", 10, 31, 10, 52)
    assert each.arms[0].walks[0].span == Span("s.walk", 11, 45, 11, 48)
    assert [(c.text, c.span.line, c.span.column) for c in result.comments] == [("# sample", 3, 42)]


def test_layout_does_not_change_the_tree() -> None:
    compact = "model m walk w(a: token) -> token { b = llm.f(a) return b } flow { start -> w -> done }"
    spread = "\n\n".join([
        "model m  # the model",
        "walk w(\n    a: token\n) -> token {\n    b = llm.f(\n        a\n    )\n    return b\n}",
        "flow {\n    start\n    ->\n    w -> done\n}",
    ])
    assert program(compact) == program(spread)


def test_a_syntax_error_is_a_diagnostic() -> None:
    result = parse("model m\nwalk w( {\n}\n", "bad.walk")
    assert result.program is None
    (d,) = result.diagnostics
    assert d.code == "E001"
    assert (d.span.file, d.span.line, d.span.column) == ("bad.walk", 2, 9)
    assert "unexpected `{`" in d.message


def test_nesting_limit_follows_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    source = "model m\nwalk w() { x = " + "(" * 20 + "1" + ")" * 20 + " }\n"
    assert parse(source).program is not None
    monkeypatch.setenv("WGC_MAX_NESTING", "16")
    (d,) = parse(source).diagnostics
    assert d.code == "E002" and "16 deep" in d.message
    assert (d.span.line, d.span.column) == (2, 16 + 15)  # the 16th `(`: 17 deep with the walk's `{`


def test_size_literals_are_exact_however_long() -> None:
    """A size is an exact integer: 7.2B is 7,200,000,000 and a 400-digit size parses (no float overflow)."""
    huge = "9" * 400
    result = parse(f"model m\ncomponent c: x.C engine stateless {{\n    weights = {huge}B\n    small = 7.2B\n}}\n")
    assert not result.diagnostics
    attrs = {a.name: a.value for a in result.program.decls[1].members}
    assert attrs["weights"].value == int(huge) * 10**9
    assert attrs["small"].value == 7_200_000_000
