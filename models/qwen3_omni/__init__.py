"""Qwen3-Omni (Qwen/Qwen3-Omni-30B-A3B-Instruct): text, audio, images and video in; text and speech out.

`tokenizer`, `voices` and `sample_rate` are the HTTP frontend's hooks (frontend.py, runtime/http/serving/hooks.py)."""

from wgc.models.qwen3_omni.audio import AudioEncoder as AudioEncoder
from wgc.models.qwen3_omni.code2wav import Code2Wav as Code2Wav
from wgc.models.qwen3_omni.frontend import sample_rate as sample_rate
from wgc.models.qwen3_omni.frontend import tokenizer as tokenizer
from wgc.models.qwen3_omni.frontend import voices as voices
from wgc.models.qwen3_omni.talker import Talker as Talker
from wgc.models.qwen3_omni.thinker import Thinker as Thinker
from wgc.models.qwen3_omni.vision import VisionEncoder as VisionEncoder
