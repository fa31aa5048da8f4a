"""What the HTTP frontend asks of BAGEL's module (runtime/http/serving/hooks.py): `tokenizer(spec)`.

BAGEL has no chat format: `interleave_inference` takes the prompt's parts in order, each text part
wrapped in `<|im_start|> ... <|im_end|>` by the LLM itself (vocab.wrap_prompt). The chat template
here therefore prints only the messages' contents (joined by a newline), so that an image part and
the question after it become [image, text] parts as BAGEL's own understanding call has them, and
no role marker doubles the wrap (vllm-omni PR #2381). Roles are dropped: a system message is text
before the user's.

The tokenizer is the LLM's: Qwen2.5's `tokenizer.json` from WGC_BAGEL_DIR when set, else the tiny
byte-level one. Token ids in and out are Qwen ids; specials decode to nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer
from wgc.models.bagel.config import IM_END, SPECIALS
from wgc.models.bagel.vocab import load_tokenizer, tiny_tokenizer
from wgc.models.layers.tokenizer import bytes_to_unicode

from wgc import settings
from wgc.plan.model import ComponentSpec

KNOB = "WGC_BAGEL_DIR"
CHAT_TEMPLATE = "{% for m in messages %}{% if not loop.first %}{{ '\\n' }}{% endif %}{{ m['content'] }}{% endfor %}"


class BagelTokenizer:
    """runtime/http/text/tokenizer.Tokenizer over a byte-level BPE `tokenizers.Tokenizer`."""

    chat_template = CHAT_TEMPLATE
    bos_token = ""
    eos_token = ""
    stop_ids = frozenset({IM_END})

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._bytes = {ch: b for b, ch in bytes_to_unicode().items()}

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> bytes:
        out = bytearray()
        for i in ids:
            token = None if int(i) in SPECIALS else self.tokenizer.id_to_token(int(i))
            if token is not None and all(ch in self._bytes for ch in token):
                out += bytes(self._bytes[ch] for ch in token)
        return bytes(out)


def tokenizer(spec: ComponentSpec) -> BagelTokenizer:
    """The frontend's hook, for the component that emits text (`llm`)."""
    directory = settings.weights_dir(KNOB)
    return BagelTokenizer(load_tokenizer(directory) if directory is not None else tiny_tokenizer())
