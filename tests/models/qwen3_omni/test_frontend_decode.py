"""The frontend's detokenizer: token ids back to the exact UTF-8 bytes they encoded, specials dropped."""

from __future__ import annotations

from wgc.models.qwen3_omni import frontend
from wgc.models.qwen3_omni.config import ThinkerConfig


def test_decode_gives_back_the_bytes_of_non_ascii_text() -> None:
    tok = frontend._tokenizer(None)
    text = "héllo, 日本 — ok\n"
    assert tok.decode(tok.encode(text)) == text.encode("utf-8")


def test_decode_drops_the_chat_markers_and_tts_specials() -> None:
    tok = frontend._tokenizer(None)
    t = ThinkerConfig.preset("tiny").tokens
    ids = [t.im_end, *tok.encode("a"), t.tts_pad, t.tts_bos, *tok.encode("é"), t.tts_eos]
    assert tok.decode(ids) == "aé".encode()
