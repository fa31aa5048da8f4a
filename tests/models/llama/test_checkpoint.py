"""Reading a llama checkpoint directory: stop ids from config.json and generation_config.json, the
chat template from chat_template.jinja before tokenizer_config.json (and its list form), the named
special tokens; one-line errors naming the file and the problem; and token ids back to bytes for
both tokenizer kinds a Llama ships (byte-level BPE, SentencePiece pieces with byte fallback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models
from wgc.models.layers.tokenizer import TokenBytes
from wgc.models.llama import ChatModel, LlamaChatConfig, load_chat_tokenizer, tiny_tokenizer
from wgc.models.weights_io import WeightsError

from tests.models.llama.checkpoint import write_checkpoint
from tests.models.llama.helpers import lm_spec

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("llama-files")
    write_checkpoint(path, seed=1)
    return path


def test_stop_ids_come_from_config_and_generation_config(directory: Path, tmp_path: Path) -> None:
    assert LlamaChatConfig.from_directory(directory).stop_ids == (257, 260)
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [260, 300]}), encoding="utf-8")
    try:
        config = LlamaChatConfig.from_directory(directory)
    finally:
        (directory / "generation_config.json").unlink()
    assert config.stop_ids == (257, 260, 300) and config.bos_id == 256


def test_the_template_and_special_tokens_are_the_checkpoint_s(directory: Path) -> None:
    config = LlamaChatConfig.from_directory(directory)
    tok = load_chat_tokenizer(directory, config)
    assert tok.template_tokens == {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                                   "pad_token": "<|end_of_text|>"}
    assert tok.chat_template == tiny_tokenizer().chat_template
    settings = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    listed = {**settings, "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}
    (directory / "tokenizer_config.json").write_text(json.dumps(listed), encoding="utf-8")
    try:
        assert load_chat_tokenizer(directory, config).chat_template == "D"
        (directory / "chat_template.jinja").write_text("J", encoding="utf-8")  # transformers prefers the file
        assert load_chat_tokenizer(directory, config).chat_template == "J"
    finally:
        (directory / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
        (directory / "chat_template.jinja").unlink(missing_ok=True)


def test_bad_directories_fail_with_one_line_naming_the_problem(directory: Path, tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match="no config.json"):
        LlamaChatConfig.from_directory(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mistral"}), encoding="utf-8")
    with pytest.raises(WeightsError, match=r"/config.json describes a `mistral` model, not a Llama$"):
        LlamaChatConfig.from_directory(tmp_path)
    (tmp_path / "config.json").write_text((directory / "config.json").read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(WeightsError, match="no tokenizer.json"):
        load_chat_tokenizer(tmp_path, LlamaChatConfig.from_directory(tmp_path))
    with pytest.raises(WeightsError, match=r"no model.safetensors and no model.safetensors.index.json"):
        ChatModel(lm_spec(), 0, "cpu", weights=tmp_path)


def test_byte_level_ids_decode_to_their_bytes() -> None:
    tok = tiny_tokenizer()
    ids = tok.encode("héllo 🙂\n")
    assert tok.decode(ids) == "héllo 🙂\n".encode() and tok.decode([256, 260]) == b""  # specials show nothing


def test_sentencepiece_pieces_decode_with_spaces_and_byte_fallback() -> None:
    vocab = {"<unk>": 0, "\u2581hello": 1, "\u2581world": 2, "<0x0A>": 3, "<0xC3>": 4, "<0xA9>": 5, "!": 6}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    pieces = TokenBytes(tok, frozenset({0}))
    assert not pieces.byte_level
    assert pieces([1, 2, 6, 3, 4, 5, 0]) == b" hello world!\n" + "é".encode()
