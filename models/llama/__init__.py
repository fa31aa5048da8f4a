"""A plain text LLM (models/llama.walk): any Llama-architecture chat model from a local Hugging Face
directory (WGC_LLAMA_DIR), or the tiny preset on random weights. See docs/models/llama.md."""

from functools import lru_cache
from pathlib import Path

from wgc.models.llama.config import LlamaChatConfig
from wgc.models.llama.model import KNOB, ChatModel
from wgc.models.llama.tokenizer import ChatTokenizer, load_chat_tokenizer, tiny_tokenizer

from wgc import settings
from wgc.plan.model import ComponentSpec


@lru_cache(maxsize=2)
def _tokenizer(directory: Path | None) -> ChatTokenizer:
    if directory is None:
        return tiny_tokenizer()
    return load_chat_tokenizer(directory, LlamaChatConfig.from_directory(directory))


def tokenizer(spec: ComponentSpec) -> ChatTokenizer:
    """The HTTP frontend's hook (runtime/http/serving/hooks.py): the checkpoint's tokenizer and chat template,
    or the tiny preset's (the walk's `eos`, which every stop id leaves the component as, is an end
    token of the frontend's as every emitter's const is)."""
    return _tokenizer(settings.weights_dir(KNOB))


__all__ = ["ChatModel", "ChatTokenizer", "LlamaChatConfig", "load_chat_tokenizer", "tiny_tokenizer", "tokenizer"]
