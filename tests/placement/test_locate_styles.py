"""The locator on TOML that test_locate.py's generated documents never write: dates and times
(with a space), bare keys that look like values, arrays of arrays, `[a.b]` after `[[a]]`, strings
that end in quotes, CRLF line ends, tables inside arrays; and every shipped placement.

Each document is checked as test_locate checks its own: every value tomllib reads is located,
and the text at its span reads back as that value.
"""

from __future__ import annotations

import tomllib

import pytest

from tests.placement.helpers import ROOT
from tests.placement.test_locate import data_at, is_table_array, leaves, text_at
from wgc.lang.span import Span
from wgc.placement.locate import locate

DOCUMENTS = {
    "dates": "d = 1979-05-27 07:32:00Z\ne = 1979-05-27\nf = 07:32:00\ng = 1979-05-27T07:32:00.5-07:00\n"
             "h = [1979-05-27 07:32:00, 1979-05-28]  # a comment after\n",
    "bare keys like values": "true = 1\n123 = false\n1.5 = 3\n-x- = -1\n'lit' = 'x'\n\"\" = 6\n\"a b\".c = 7\n",
    "numbers": "a = +inf\nb = -nan\nc = 0x1F\nd = 1_000\ne = 1e-3\nf = -0.0\ng = 0o17\nh = 0b101\n",
    "arrays of arrays": "a = [[1, 2], [3]]\nb = [ [ [ 1 ] ], [] ]\nc = [\n  [1], # one\n  [2],\n]\n",
    "tables in arrays of tables": "[[a]]\nx = 1\n[a.b]\ny = 2\n[[a]]\nx = 2\n[[a.c]]\nz = 3\n[[a.c]]\nz = 4\n",
    "strings ending in quotes": 's = """\nab"""""\nt = \'\'\'x\'\'\'\'\'\nu = "a\\"b"\nv = """a\\\n  b"""\n'
                                "w = '''\n[not] = a header'''\n",
    "inline tables": "t = { a = 1, b.c = [1, { d = 2 }] }\nu = [{ a = 1 }, { b = [2] }]\nv = {}\n",
    "crlf": "a = 1\r\n[b]\r\nc = [1,\r\n  2]\r\n",
    "comments and strings": 'x = "# not a comment"  # a comment\ny = \'[z]\'\n',
}


def check(text: str) -> None:
    data, found = tomllib.loads(text), locate(text, "t.toml")
    for path, value in leaves(data, ()):
        assert path in found, path
        if isinstance(value, dict) and not text_at(text, found[path].value).startswith("{"):
            continue  # a table from a [header] or a dotted key: its span is the header or the key
        if is_table_array(value) or (isinstance(path[-1], int) and is_table_array(data_at(data, path[:-1]))):
            continue  # placed by their [[headers]]
        read = tomllib.loads("x = " + text_at(text, found[path].value))["x"]
        assert repr(read) == repr(value), path  # repr: nan equals itself


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_value_is_located(name: str) -> None:
    check(DOCUMENTS[name])


@pytest.mark.parametrize("path", sorted((ROOT / "placements").rglob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_placement_is_located(path) -> None:
    check(path.read_text(encoding="utf-8"))


def test_spans_of_headers_dates_and_arrays_of_arrays() -> None:
    found = locate("[[a]]\n[a.b]\nd = 1979-05-27 07:32:00\nx = [[1], [2, 3]]\n", "f")
    assert found[("a", 0, "b")].value == Span("f", 2, 1, 2, 6)  # `[a.b]` after `[[a]]`: in a's element 0
    assert found[("a", 0)].value == Span("f", 1, 1, 1, 6)  # an element of an array of tables: its header
    assert found[("a", 0, "b", "d")].value == Span("f", 3, 5, 3, 24)  # the date and the time
    assert found[("a", 0, "b", "x", 1, 1)].value == Span("f", 4, 15, 4, 16)


def test_a_key_that_looks_like_a_value_is_a_key() -> None:
    found = locate("true = 1\n123 = [true]\n", "f")
    assert found[("true",)].key == Span("f", 1, 1, 1, 5)
    assert found[("123", 0)].value == Span("f", 2, 8, 2, 12)
