"""BAGEL (ByteDance-Seed/BAGEL-7B-MoT): text + image in, text or image out. Components grow here."""

from wgc.models.bagel.combine import GuidanceCombine as GuidanceCombine
from wgc.models.bagel.config import BagelLLMConfig as BagelLLMConfig
from wgc.models.bagel.frontend import tokenizer as tokenizer  # the HTTP frontend's hook (runtime/http/serving/hooks.py)
from wgc.models.bagel.latents import LatentAdapter as LatentAdapter
from wgc.models.bagel.latents import PositionTable as PositionTable
from wgc.models.bagel.latents import TimestepEmbedder as TimestepEmbedder
from wgc.models.bagel.latents import latent_ids as latent_ids
from wgc.models.bagel.latents import patchify as patchify
from wgc.models.bagel.latents import sincos_2d as sincos_2d
from wgc.models.bagel.latents import unpatchify as unpatchify
from wgc.models.bagel.llm import LanguageModel as LanguageModel
from wgc.models.bagel.mot import MoTLM as MoTLM
from wgc.models.bagel.vae import VaeDecoder as VaeDecoder
from wgc.models.bagel.vae import VaeEncoder as VaeEncoder
from wgc.models.bagel.vit import VitEncoder as VitEncoder
