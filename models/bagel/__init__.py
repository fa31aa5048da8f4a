"""BAGEL (ByteDance-Seed/BAGEL-7B-MoT): text + image in, text or image out. Components grow here."""

from wgc.models.bagel.latents import LatentAdapter, PositionTable, TimestepEmbedder, latent_ids, patchify, sincos_2d, unpatchify
