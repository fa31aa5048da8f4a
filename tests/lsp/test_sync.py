"""Incremental sync: the server asks for edit ranges and turns them into offset edits of its text.

What the edits are for (mapping the last analysis that parsed onto the current text) is tested
through the real server in test_stale.py; here, the handshake and the conversion.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import IO

from lsprotocol import types

from wgc.lsp.positions import UTF16
from wgc.lsp.server import replay


def _frame(message: dict) -> bytes:
    body = json.dumps(message).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _read_message(stream: IO[bytes]) -> dict:
    length = 0
    while (line := stream.readline().strip()):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    return json.loads(stream.read(length))


def test_the_server_asks_for_incremental_sync() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "wgc", "lsp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                 "params": {"processId": None, "rootUri": None, "capabilities": {}}}))
        proc.stdin.flush()
        reply = _read_message(proc.stdout)
        sync = reply["result"]["capabilities"]["textDocumentSync"]
        assert sync["change"] == types.TextDocumentSyncKind.Incremental.value
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _change(start: tuple[int, int], end: tuple[int, int], text: str) -> types.TextDocumentContentChangePartial:
    return types.TextDocumentContentChangePartial(
        range=types.Range(start=types.Position(line=start[0], character=start[1]),
                          end=types.Position(line=end[0], character=end[1])), text=text)


def test_ranges_in_utf16_units_become_code_point_offsets() -> None:
    text = 'param v: str = "🎉"\nwalk w() {}\n'
    # `w` on line 1, and the closing quote on line 0, after the emoji (two UTF-16 units, one code point).
    replayed = replay(text, [_change((1, 5), (1, 6), "decode"), _change((0, 18), (0, 18), "x")], UTF16)
    assert replayed is not None
    new, edits = replayed
    assert new == 'param v: str = "🎉x"\nwalk decode() {}\n'
    assert edits == [(text.index("w()"), text.index("w()") + 1, 6), (text.index('"\n'), text.index('"\n'), 1)]


def test_each_change_is_in_the_text_the_ones_before_it_left() -> None:
    text = "ab\ncd\n"
    # The first change joins the lines; the second's position is on the joined line.
    replayed = replay(text, [_change((0, 2), (1, 0), ""), _change((0, 3), (0, 4), "X")], UTF16)
    assert replayed == ("abcX\n", [(2, 3, 0), (3, 4, 1)])


def test_a_whole_text_change_gives_no_edits() -> None:
    whole = types.TextDocumentContentChangeWholeDocument(text="model m\n")
    assert replay("model x\n", [_change((0, 0), (0, 0), "# a\n"), whole], UTF16) is None
