"""The locator finds every key and value tomllib reads, at the right place, in any TOML style.

Documents are generated: nested tables as headers or dotted keys, inline tables, arrays of
tables, arrays over several lines with comments, every kind of string. For every value,
the text at its span must parse back to that value, and the key span must name the key.
"""

from __future__ import annotations

import json
import tomllib

from hypothesis import given, settings
from hypothesis import strategies as st

from wgc.lang.span import Span
from wgc.placement.locate import locate

KEYS = st.one_of(st.from_regex(r"[a-z][a-z0-9_-]{0,6}", fullmatch=True), st.sampled_from(["a b", "x.y", "é", ""]))
SAFE_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=8)
SCALARS = st.one_of(
    st.integers(-(10**6), 10**6),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    SAFE_TEXT,
)


def render_key(k: str) -> str:
    return k if k and all(c.isalnum() and c.isascii() or c in "_-" for c in k) else json.dumps(k, ensure_ascii=False)


def render_value(v: object, style: int) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        if style % 3 == 1 and "'" not in v:
            return f"'{v}'"
        if style % 3 == 2 and '"' not in v and "\\" not in v:
            return f'"""\n{v}"""'
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        sep = ",\n  # note\n  " if style % 2 else ", "
        return "[" + sep.join(render_value(x, style + 1) for x in v) + "]"
    assert isinstance(v, dict)
    return "{ " + ", ".join(f"{render_key(k)} = {render_value(x, style)}" for k, x in v.items()) + " }"


LEAVES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(KEYS, SCALARS, max_size=2))
TABLES = st.recursive(
    st.dictionaries(KEYS, LEAVES, max_size=3),
    lambda inner: st.dictionaries(KEYS, st.one_of(LEAVES, inner, st.lists(inner, min_size=1, max_size=2)), max_size=3),
    max_leaves=12,
)


def is_table_array(v: object) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def render_table(path: list[str], table: dict, style: int, out: list[str]) -> None:
    nested = {k: v for k, v in table.items() if isinstance(v, dict) and style % 2 == 0 and v}
    for k, v in table.items():
        if k in nested or is_table_array(v):
            continue
        out.append(f"{render_key(k)}  =  {render_value(v, style)}  # c")
    for k, v in nested.items():
        header = ".".join(render_key(p) for p in [*path, k])
        out.append(f"\n[ {header} ]")
        render_table([*path, k], v, style + 1, out)
    for k, v in table.items():
        if is_table_array(v):
            for item in v:
                out.append(f"\n[[{'.'.join(render_key(p) for p in [*path, k])}]]")
                render_table([*path, k], item, style + 1, out)


def text_at(text: str, span: Span) -> str:
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    return text[starts[span.line - 1] + span.column - 1 : starts[span.end_line - 1] + span.end_column - 1]


def leaves(value: object, path: tuple) -> list[tuple[tuple, object]]:
    out: list[tuple[tuple, object]] = [(path, value)] if path else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += leaves(v, (*path, k))
    elif is_table_array(value):
        for i, v in enumerate(value):  # type: ignore[arg-type]
            out += leaves(v, (*path, i))
    return out


@settings(max_examples=150, deadline=None)
@given(TABLES, st.integers(0, 5))
def test_every_value_is_located(table: dict, style: int) -> None:
    lines: list[str] = []
    render_table([], table, style, lines)
    text = "\n".join(lines) + "\n"
    data = tomllib.loads(text)
    found = locate(text, "t.toml")
    for path, value in leaves(data, ()):
        assert path in found, (path, text)
        where = found[path]
        if isinstance(value, dict) and path[-1:] and text_at(text, where.value).lstrip().startswith("["):
            continue  # a table from a [header]: its span is the header
        if is_table_array(value) or (isinstance(path[-1], int) and is_table_array(data_at(data, path[:-1]))):
            continue  # arrays of tables and their elements are placed by their [[headers]]
        assert tomllib.loads("x = " + text_at(text, where.value))["x"] == value, (path, text)
        if isinstance(path[-1], str):
            key_text = text_at(text, where.key)
            assert tomllib.loads(f"{key_text} = 1") is not None


def data_at(data: object, path: tuple) -> object:
    for p in path:
        data = data[p]  # type: ignore[index]
    return data


def test_positions_are_one_based_and_end_exclusive() -> None:
    text = '[cluster]\ndevice = "cuda"\nranks = [0,\n  1]\n'
    found = locate(text, "f")
    assert found[("cluster", "device")].key == Span("f", 2, 1, 2, 7)
    assert found[("cluster", "device")].value == Span("f", 2, 10, 2, 16)
    assert found[("cluster", "ranks")].value == Span("f", 3, 9, 4, 5)
    assert found[("cluster", "ranks", 1)].value == Span("f", 4, 3, 4, 4)


def test_text_tomllib_rejects_never_raises_and_keeps_what_came_before() -> None:
    for bad in ("[a", "x = [1, 2", 'x = "', "x = {", "[[a]]\n[a]\n", "= 1", "x = 1 2"):
        assert isinstance(locate(bad, "f"), dict)  # never raises
    # Each entry before the error is located as in a valid file (the diagnostics point at it).
    assert locate("[a", "f") == {} and locate("= 1", "f") == {}
    for bad in ('y = 2\nx = [1, 2', "y = 2\n[a", "y = 2\nx = 1 2"):
        found = locate(bad, "f")
        assert set(found) == {("y",)}, bad
        assert (found[("y",)].key, found[("y",)].value) == (Span("f", 1, 1, 1, 2), Span("f", 1, 5, 1, 6))
    found = locate('[t]\ny = [1, 2]\n[u', "f")
    assert set(found) == {("t",), ("t", "y"), ("t", "y", 0), ("t", "y", 1)}
    assert found[("t", "y", 1)].value == Span("f", 2, 9, 2, 10)
