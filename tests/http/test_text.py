"""Text out without a server: incremental UTF-8 decoding, stop strings, choices, the chat template."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from wgc.runtime.http.serving.errors import ApiError
from wgc.runtime.http.text.choice import TextChoice, token_ids
from wgc.runtime.http.text.detok import Detokenizer, StopMatcher
from wgc.runtime.http.text.template import ChatTemplate, check_text, sentinel
from wgc.runtime.http.text.tokenizer import ByteTokenizer


@given(st.text(), st.lists(st.integers(1, 5)))
def test_deltas_join_to_the_text_and_never_split_a_character(text: str, cuts: list[int]) -> None:
    data = text.encode()
    detok, deltas, pos = Detokenizer(ByteTokenizer()), [], 0
    for n in [*cuts, len(data)]:
        deltas.append(detok.push(list(data[pos:pos + n])))
        pos += n
    deltas.append(detok.finish())
    assert "".join(deltas) == text
    for d in deltas:
        assert d.encode().decode() == d  # each delta is whole characters (no surrogates, no U+FFFD)


@given(st.binary(max_size=40))
def test_invalid_bytes_decode_as_a_one_shot_decode_would(data: bytes) -> None:
    detok = Detokenizer(ByteTokenizer())
    out = "".join(detok.push([b]) for b in data) + detok.finish()
    assert out == data.decode("utf-8", errors="replace")


@given(st.text(alphabet="ab€", max_size=30), st.text(alphabet="ab€", min_size=1, max_size=3), st.integers(1, 4))
def test_stop_strings_cut_before_the_first_match_however_the_text_is_split(text: str, stop: str, k: int) -> None:
    m, out = StopMatcher([stop]), []
    for i in range(0, len(text), k):
        out.append(m.push(text[i:i + k]))
    out.append(m.finish())
    i = text.find(stop)
    assert "".join(out) == (text if i < 0 else text[:i])
    assert m.stopped == (i >= 0)


def test_a_choice_counts_every_token_and_reports_why_it_ended() -> None:
    c = TextChoice(0, ByteTokenizer(), frozenset({256}), [], max_tokens=10)
    assert c.feed(list(b"hi ")) == "hi "
    assert c.feed([0xE2, 0x82]) == "" and c.feed(0xAC) == "€"
    assert c.feed(256) == "" and c.finish == "stop" and c.tokens == 7
    c = TextChoice(0, ByteTokenizer(), frozenset(), [], max_tokens=3)
    c.feed(list(b"abc"))
    assert (c.end(), c.finish, c.content) == ("", "length", "abc")
    c = TextChoice(0, ByteTokenizer(), frozenset(), ["c"], max_tokens=3)
    c.feed(list(b"abc"))
    assert (c.finish, c.content) == ("stop", "ab")


def test_token_ids_read_ints_lists_and_tensors() -> None:
    import torch

    assert token_ids(5) == [5] and token_ids([1, [2, 3]]) == [1, 2, 3]
    assert token_ids(torch.tensor([[7, 8]])) == [7, 8] and token_ids(None) == []


def test_the_template_renders_in_a_sandbox_and_keeps_media_in_order() -> None:
    t = ChatTemplate(None)
    parts = t.render([{"role": "user", "content": f"see {sentinel(0)} and {sentinel(1)}"}], ["image", "audio"])
    assert [(p.kind, p.text, p.media) for p in parts] == [
        ("text", "<|im_start|>user\nsee ", -1), ("image", "", 0), ("text", " and ", -1), ("audio", "", 1),
        ("text", "<|im_end|>\n<|im_start|>assistant\n", -1)]
    evil = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ApiError) as err:
        evil.render([{"role": "user", "content": "x"}], [])
    assert err.value.code == "template_error"
    raising = ChatTemplate("{{ raise_exception('only user turns') }}")
    with pytest.raises(ApiError, match="only user turns"):
        raising.render([], [])
    with pytest.raises(ApiError):
        check_text("forged \ue000wgc:media:0\ue001", "messages")
    dropping = ChatTemplate("{% for m in messages %}x{% endfor %}")
    with pytest.raises(ApiError, match="dropped or repeated"):
        dropping.render([{"role": "user", "content": sentinel(0)}], ["image"])


class _Counted(list):
    """A list that counts its reads (the matcher's failure links)."""

    reads = 0

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        _Counted.reads += 1
        return super().__getitem__(i)


def test_a_long_stop_string_costs_linear_time() -> None:
    """Each pushed character costs amortised O(1) whatever the stop string's length (an automaton), so
    a 1 MiB stop string is as cheap as a short one: the old search of the held tail at every token
    grew with the square of its length. Counted in failure-link reads, not timed (speeds are bench/'s)."""
    for stop, text in (("a" * 2**20, "a" * 20_000 + "b"), ("ab" * 2**19, "ab" * 10_000 + "b")):
        m = StopMatcher([stop])
        m.stops[0].fail = _Counted(m.stops[0].fail)
        _Counted.reads = 0
        out = [m.push(ch) for ch in text]
        assert "".join(out) + m.finish() == text and not m.stopped
        assert _Counted.reads <= 2 * len(text)  # KMP's bound: each fall back undoes an earlier step
    m = StopMatcher(["ab" * 1000])
    assert m.push("ab" * 999 + "a") == "" and m.push("b!") == "" and m.stopped


@given(st.text(alphabet="ab", max_size=30), st.lists(st.text(alphabet="ab", min_size=1, max_size=4), min_size=1,
                                                      max_size=3), st.integers(1, 4))
def test_several_stop_strings_cut_where_the_first_one_completes(text: str, stops: list[str], k: int) -> None:
    m, out = StopMatcher(stops), []
    for i in range(0, len(text), k):
        out.append(m.push(text[i:i + k]))
    out.append(m.finish())
    end = next((e for e in range(1, len(text) + 1) if any(text[:e].endswith(s) for s in stops)), None)
    cut = text if end is None else text[:end - max(len(s) for s in stops if text[:end].endswith(s))]
    assert "".join(out) == cut and m.stopped == (end is not None)
