"""π0.5's prompt: the task text and the robot state discretised into it (openpi's
`PaligemmaTokenizer.tokenize` with a state; lerobot's `Pi05PrepareStateTokenizerProcessorStep`).

The state, normalised to [-1, 1] (stats.py) and zero-padded to the model's 32 dims, falls into 256
bins: bin = digitize(x, the 256 left edges of linspace(-1, 1, 257)) - 1, so x in [-1, 1) gives 0..255,
x >= 1 - 1/128 gives 255 and x < -1 gives -1 (as lerobot writes it: the reference does not clip).
The prompt is `Task: {task}, State: {b0 b1 ... b31};\\nAction: `, the task stripped, its underscores and
newlines turned into spaces; it is encoded with BOS and never padded (the KV engine holds only the
valid tokens, so the reference's right padding and mask have nothing to do).

Tokenizers: the checkpoint's PaliGemma tokenizer.json through `tokenizers` (<bos> is id 2; put first
by its post-processor, or by `encode` when it has none), or the tiny preset's byte tokenizer with
<bos> at 256.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import Tensor
from wgc.models.layers.tokenizer import byte_tokenizer, read_tokenizer
from wgc.models.pi05.config import BOS, TINY_BOS

BINS = 256


def discretize(state: Tensor) -> list[int]:
    """Normalised state [S] -> its bins (numpy.digitize's rule, in float64 like numpy's edges)."""
    edges = torch.linspace(-1.0, 1.0, BINS + 1, dtype=torch.float64)[:-1]  # [256]
    return (torch.bucketize(state.double(), edges, right=True) - 1).tolist()


def clean_task(task: str) -> str:
    return task.strip().replace("_", " ").replace("\n", " ")


def pi05_prompt(task: str, bins: list[int]) -> str:
    return f"Task: {clean_task(task)}, State: {' '.join(map(str, bins))};\nAction: "


def tiny_tokenizer() -> Tokenizer:
    """Bytes are ids 0..255, <bos> 256 prepended by the post-processor."""
    return byte_tokenizer({TINY_BOS: "<bos>"}, bos=TINY_BOS)


def load_tokenizer(directory: Path) -> Tokenizer:
    """The directory's PaliGemma tokenizer.json; its <bos> must be id 2 (PaliGemma's)."""
    tokenizer = read_tokenizer(directory, "PaliGemma's tokenizer")
    bos = tokenizer.token_to_id("<bos>")
    if bos != BOS:
        raise ValueError(f"{Path(directory) / 'tokenizer.json'}: <bos> is {bos}, not {BOS}: not PaliGemma's tokenizer")
    return tokenizer


def encode(tokenizer: Tokenizer, text: str, bos: int) -> list[int]:
    """The prompt's ids with <bos> first: added by the tokenizer's post-processor (PaliGemma's, as
    transformers' add_special_tokens does) or here when a tokenizer.json has none."""
    ids = tokenizer.encode(text).ids
    return ids if ids[:1] == [bos] else [bos, *ids]
