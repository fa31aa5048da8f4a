"""What the HTTP frontend asks of Qwen3-Omni's module (runtime/http/serving/hooks.py): `tokenizer(spec)`,
`voices(spec)` and `sample_rate(spec)`.

The chat template. The thinker frames a request's parts itself (chat.py): a part written while no
turn is open opens a user turn, `begin_reply` closes the open turn and writes the assistant header,
and each medium gets its start and end markers. The template therefore prints every turn as
Qwen3-Omni's own template does (`<|im_start|>{role}\\n{content}<|im_end|>\\n`, developer as system)
but with a medium as its bare sentinel (no markers) and no generation prompt. The one exception is a
conversation that begins with a user turn: its header is left to the thinker, which writes the same
three tokens (`<|im_start|>`, the user id, `\\n`) and so also opens it with the user role id in the
tiny preset, whose byte-level vocabulary has no token for the word after `<|im_start|>` (there, a
later user turn written as text is not recognised as one, and the talker does not read it).

The tokenizer is the thinker's: the checkpoint's `tokenizer.json` from WGC_QWEN3_OMNI_DIR when set
(checked against its config.json, weights.py), else the tiny byte-level one. Ids in and out are Qwen ids; specials decode to nothing.

Voices are the talker's speakers, by the names of the checkpoint's `talker_config.speaker_id`
(the tiny preset keeps the names at its remapped ids); the frontend offers those of the walk's
`speaker` choices that the checkpoint has.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer
from wgc.models.layers.tokenizer import TokenBytes
from wgc.models.qwen3_omni import chat
from wgc.models.qwen3_omni.code2wav_config import SAMPLE_RATE
from wgc.models.qwen3_omni.config import ThinkerConfig
from wgc.models.qwen3_omni.talker_config import TalkerConfig
from wgc.models.qwen3_omni.weights import KNOB, Checkpoint

from wgc import settings
from wgc.plan.model import ComponentSpec

CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% set role = 'system' if m['role'] == 'developer' else m['role'] %}"
    "{% if not (loop.first and role == 'user') %}<|im_start|>{{ role }}\n{% endif %}"
    "{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}"
)


class OmniTokenizer:
    """runtime/http/text/tokenizer.Tokenizer over the thinker's byte-level BPE `tokenizers.Tokenizer`."""

    chat_template = CHAT_TEMPLATE
    bos_token = ""
    eos_token = "<|im_end|>"

    def __init__(self, tokenizer: Tokenizer, config: ThinkerConfig) -> None:
        self.tokenizer = tokenizer
        added = tokenizer.get_added_tokens_decoder()
        self.specials = frozenset(i for i, t in added.items() if t.special) | {config.tokens.tts_pad,
                                                                               config.tokens.tts_bos,
                                                                               config.tokens.tts_eos}
        self.stop_ids = frozenset({config.tokens.im_end})
        self._bytes = TokenBytes(tokenizer, self.specials)

    def encode(self, text: str) -> list[int]:
        return chat.encode(self.tokenizer, text)

    def decode(self, ids: Sequence[int]) -> bytes:
        return self._bytes(ids)


def _directory() -> Path | None:
    return settings.weights_dir(KNOB)


@lru_cache(maxsize=2)
def _tokenizer(directory: Path | None) -> OmniTokenizer:
    """As the thinker takes it (thinker.py): the checkpoint's, checked (weights.Checkpoint), else the tiny one."""
    if directory is None:
        tiny = ThinkerConfig.preset("tiny")
        return OmniTokenizer(chat.tiny_tokenizer(tiny.tokens), tiny)
    checkpoint = Checkpoint(directory)
    return OmniTokenizer(checkpoint.tokenizer, checkpoint.thinker_config)


def tokenizer(spec: ComponentSpec) -> OmniTokenizer:
    """The frontend's hook, for the component that emits text (`thinker`)."""
    return _tokenizer(_directory())


def speakers(directory: Path | None) -> tuple[str, ...]:
    """The talker's speaker names in id order: the checkpoint's, else the tiny preset's."""
    config = TalkerConfig.preset("tiny") if directory is None else Checkpoint(directory).talker_config
    return tuple(name for name, _ in config.speakers)


def voices(spec: ComponentSpec) -> tuple[str, ...]:
    """The frontend's hook, for the component that emits audio: the speakers a request may name."""
    return speakers(_directory())


def sample_rate(spec: ComponentSpec) -> int:
    """The frontend's hook, for the component that emits audio (`code2wav`): 24 kHz."""
    return SAMPLE_RATE
