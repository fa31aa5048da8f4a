"""Real BAGEL weights from a local `ByteDance-Seed/BAGEL-7B-MoT` directory (models-wave2.md §1.9):

    ema.safetensors    language_model.* (the MoT LLM), vit_model.* + connector.* + vit_pos_embed.* (the
                       ViT), vae2llm.* + llm2vae.* + time_embedder.* + latent_pos_embed.* (the adapter)
    ae.safetensors     the FLUX VAE in BFL's names (vae_bfl.py)
    llm_config.json    a Qwen2 config; BAGEL forces qk_norm on and the head untied, whatever it says
    vit_config.json    a SigLIP vision config; its num_hidden_layers counts the checkpoint's layers,
                       one more than run (BAGEL's app.py drops the last; its tensors are skipped)
    tokenizer.json     Qwen2.5's tokenizer (the real vocabulary; the four specials at their ids)

`Checkpoint` reads the configs and the two headers once; each component then takes its own part:
`language_model` and `adapter` (the LLM), `vit`, `vae(half)` and `adapter` (the VAE encoder). Each part
is built on the meta device from the configs, every name, shape and dtype the part owns is checked
against the file's header (a name under no BAGEL prefix counts as unexpected), and only then is
memory allocated on the target device and each tensor read once, straight into its parameter. Every
problem is a WeightsError of one line naming the file, the tensor and what is wrong.

Sizes the configs do not hold are read off the header: the latent grid (`latent_pos_embed` rows are
grid²; 64 in the 7B checkpoint), the timestep features, and the VAE's architecture (vae_bfl.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import nn
from wgc.models.bagel.config import SPECIAL_NAMES, SPECIALS, BagelLLMConfig
from wgc.models.bagel.latents import LATENT_CHANNELS, TOKEN_DIM, LatentAdapter
from wgc.models.bagel.mot import MoTLM
from wgc.models.bagel.resize import ResizeRule
from wgc.models.bagel.vae import PRESETS, VAE_7B, VaeConfig, build_vae
from wgc.models.bagel.vae_bfl import bfl_architecture, bfl_mapping, bfl_shapes
from wgc.models.bagel.vit import BagelVit, VitConfig
from wgc.models.bagel.vit_transform import Resize
from wgc.models.bagel.vocab import load_tokenizer
from wgc.models.layers.tp_modules import Group
from wgc.models.layers.tp_shard import shard_reads, shard_structure
from wgc.models.weights_io import (
    Entry,
    Found,
    WeightsError,
    allocate,
    check_tensors,
    load_tensors,
    meta_module,
    read_headers,
    read_json,
    shapes,
)

KNOB = "WGC_BAGEL_DIR"
EMA, AE, LLM_CONFIG, VIT_CONFIG, TOKENIZER = ("ema.safetensors", "ae.safetensors", "llm_config.json",
                                              "vit_config.json", "tokenizer.json")
LAYOUT = f"a BAGEL-7B-MoT directory holds {EMA}, {AE}, {LLM_CONFIG}, {VIT_CONFIG} and {TOKENIZER}"
LLM = ("language_model.",)
VIT = ("vit_model.", "connector.", "vit_pos_embed.")
ADAPTER = ("vae2llm.", "llm2vae.", "time_embedder.", "latent_pos_embed.")
KNOWN = LLM + VIT + ADAPTER  # every prefix of ema.safetensors
VIT_RESIZES = {70: "7b", 4: "tiny"}  # ViT position grid -> the preset whose resize bounds it uses


class Checkpoint:
    """A local BAGEL directory: its configs and headers, read once, and each component's part."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise WeightsError(f"{self.directory}: not a directory ({KNOB} names a local BAGEL directory; {LAYOUT})")

    def path(self, name: str) -> Path:
        path = self.directory / name
        if not path.is_file():
            raise WeightsError(f"{self.directory}: no {name} ({LAYOUT})")
        return path

    @cached_property
    def ema(self) -> dict[str, Entry]:
        return read_headers([self.path(EMA)])

    @cached_property
    def ae(self) -> dict[str, Entry]:
        return read_headers([self.path(AE)])

    def _json(self, name: str) -> dict[str, Any]:
        return read_json(self.directory / name, f"{self.directory}: no {name} ({LAYOUT})")

    @cached_property
    def latent_grid(self) -> int:
        """The side of `latent_pos_embed`'s table (BAGEL's max_latent_size)."""
        rows = _shape(self.ema, "latent_pos_embed.pos_embed", self.path(EMA))[0]
        grid = math.isqrt(rows)
        if grid * grid != rows:
            raise WeightsError(f"{self.path(EMA)}: tensor latent_pos_embed.pos_embed has {rows} rows, not a square grid")
        return grid

    @cached_property
    def llm_config(self) -> BagelLLMConfig:
        path = self.directory / LLM_CONFIG
        features = _shape(self.ema, "time_embedder.mlp.0.weight", self.path(EMA))[-1]
        return parse_llm_config(self._json(LLM_CONFIG), path, str(self.directory), self.latent_grid, features)

    @cached_property
    def vae_base(self) -> VaeConfig:
        """The VAE preset of this latent grid (its resize bounds, its warm-up size), else the 7B's with
        bounds for the grid."""
        grid = self.latent_grid
        base = next((c for c in PRESETS.values() if c.latent_grid == grid), None)
        if base is not None:
            return base
        side = grid * 16
        return replace(VAE_7B, resize=ResizeRule(side, side // 2, 16, side * side), warm_sizes=((side, side),))

    @cached_property
    def vae_config(self) -> VaeConfig:
        path = self.path(AE)
        c = replace(self.vae_base, **bfl_architecture(self.ae, path), llm_hidden=self.llm_config.hidden,
                    latent_grid=self.latent_grid)
        if c.z_channels != LATENT_CHANNELS or c.downsample != 8:
            raise WeightsError(f"{path}: a VAE of {c.z_channels} latent channels at {c.downsample}x; BAGEL's latents "
                               f"are FLUX's, {LATENT_CHANNELS} channels at 8x")
        return c

    @cached_property
    def vit_config(self) -> VitConfig:
        return parse_vit_config(self._json(VIT_CONFIG), self.directory / VIT_CONFIG, str(self.directory),
                                self.llm_config.hidden, self.vae_base.resize)

    def tokenizer(self) -> Tokenizer:
        """tokenizer.json, checked: BAGEL's four specials at their Qwen ids, every id inside the vocabulary."""
        path = self.directory / TOKENIZER
        try:
            tokenizer = load_tokenizer(self.directory)
        except (FileNotFoundError, ValueError) as err:
            raise WeightsError(str(err)) from None
        for token in SPECIALS:
            found = tokenizer.token_to_id(SPECIAL_NAMES[token])
            if found != token:
                raise WeightsError(f"{path}: {SPECIAL_NAMES[token]} is token {found}, BAGEL's is {token}")
        largest = max(tokenizer.get_vocab(with_added_tokens=True).values())
        if largest >= self.llm_config.vocab:
            raise WeightsError(f"{path}: token id {largest} is outside {LLM_CONFIG}'s vocab_size {self.llm_config.vocab}")
        return tokenizer

    # ---- the parts -------------------------------------------------------------------------------

    def language_model(self, device: torch.device | str, dtype: torch.dtype, group: Group | None = None) -> MoTLM:
        """`language_model.*`: both experts, the embedding and the untied head; with a tensor-parallel
        `group` of more than one rank, rank group.rank's shard, read as its parts only (tp_shard.py)."""
        return self._part(lambda: MoTLM(self.llm_config), LLM, lambda n: "language_model." + n, device, dtype,
                          group=group)

    def adapter(self, device: torch.device | str, dtype: torch.dtype) -> LatentAdapter:
        """`vae2llm`, `llm2vae`, `time_embedder`, `latent_pos_embed`: the LLM's and the VAE encoder's alike."""
        c = self.llm_config
        return self._part(lambda: LatentAdapter(c.hidden, c.latent_grid, TOKEN_DIM, c.timestep_features), ADAPTER,
                          lambda n: n, device, dtype)

    def vit(self, device: torch.device | str, dtype: torch.dtype) -> BagelVit:
        """SigLIP under `vit_model.`, the connector and `vit_pos_embed`; the checkpoint's last layer skipped."""
        skipped = f"vit_model.vision_model.encoder.layers.{self.vit_config.layers}."
        return self._part(lambda: BagelVit(self.vit_config), VIT,
                          lambda n: "vit_model." + n if n.startswith("vision_model.") else n, device, dtype,
                          lambda n: n.startswith(skipped))

    def vae(self, half: str, device: torch.device | str, dtype: torch.dtype) -> nn.Module:
        """The FLUX VAE's `half` ("encoder" or "decoder"); the whole ae.safetensors is checked, only the
        half's tensors are read."""
        path, c = self.path(AE), self.vae_config
        expected = bfl_shapes(c)
        check_tensors(self.ae, expected, path)
        module = meta_module(lambda: build_vae(c, keep=(half,)))
        try:
            mapping = bfl_mapping(module, expected)
        except WeightsError as err:
            raise WeightsError(f"{path}: {err}") from None
        module = allocate(module, device, dtype)
        own = module.state_dict(keep_vars=True)
        load_tensors({bfl: own[key] for bfl, key in mapping.items()}, self.ae)
        return module.eval()

    def _part(self, build: Callable[[], Any], prefixes: tuple[str, ...], name: Callable[[str], str],
              device: torch.device | str, dtype: torch.dtype, skip: Callable[[str], bool] = lambda n: False,
              group: Group | None = None) -> Any:
        """Build on meta, check the part's names in ema.safetensors (and any under no BAGEL prefix),
        cut to `group`'s shard if given, allocate, read each tensor (or the shard's part of it) once
        into its parameter."""
        module = meta_module(build)
        mine = {n: e for n, e in self.ema.items() if n.startswith(prefixes) or not n.startswith(KNOWN)}
        check_tensors(mine, shapes(module, name), self.path(EMA), skip)
        cuts = shard_structure(module, group) if group is not None and group.size > 1 else {}
        module = allocate(module, device, dtype)
        targets, parts = shard_reads(module, cuts, name)
        load_tensors(targets, self.ema, parts)
        return module.eval()


def _shape(found: Found, name: str, where: Path) -> tuple[int, ...]:
    entry = found.get(name)
    if entry is None:
        raise WeightsError(f"{where}: missing tensor {name}")
    if not entry.shape:
        raise WeightsError(f"{where}: tensor {name} is a scalar, not a table")
    return entry.shape


class _Fields:
    """A config file's fields, each refused in one line naming the file and the key."""

    def __init__(self, raw: dict[str, Any], path: Path) -> None:
        self.raw, self.path = raw, path

    def integer(self, key: str, default: int | None = None, least: int = 1) -> int:
        value = self.raw.get(key, default)
        if value is None:
            raise WeightsError(f"{self.path}: no `{key}`")
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise WeightsError(f"{self.path}: `{key}` is {value!r}, expected an integer of at least {least}")
        return value

    def number(self, key: str, default: float) -> float:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise WeightsError(f"{self.path}: `{key}` is {value!r}, expected a positive number")
        return float(value)

    def one_of(self, key: str, allowed: tuple[Any, ...]) -> None:
        value = self.raw.get(key, allowed[0])
        if value not in allowed:
            raise WeightsError(f"{self.path}: `{key}` is {value!r}; BAGEL's is {allowed[0]!r}")


def parse_llm_config(raw: dict[str, Any], path: Path, name: str, latent_grid: int, features: int) -> BagelLLMConfig:
    """BagelLLMConfig from llm_config.json (a Qwen2 config); qk_norm on and the head untied, as BAGEL
    forces them. The vocabulary is the real one: it must hold the specials' ids."""
    f = _Fields(raw, path)
    f.one_of("model_type", ("qwen2",))
    f.one_of("hidden_act", ("silu",))
    f.one_of("rope_scaling", (None,))
    vocab, hidden, heads = f.integer("vocab_size"), f.integer("hidden_size"), f.integer("num_attention_heads")
    kv_heads = f.integer("num_key_value_heads", heads)
    if vocab <= max(SPECIALS):
        raise WeightsError(f"{path}: vocab_size {vocab} cannot hold BAGEL's special tokens (up to {max(SPECIALS)})")
    if heads % kv_heads:
        raise WeightsError(f"{path}: {heads} attention heads do not share {kv_heads} key/value heads evenly")
    return BagelLLMConfig(name, vocab=vocab, hidden=hidden, layers=f.integer("num_hidden_layers"), heads=heads,
                          kv_heads=kv_heads, head_dim=f.integer("head_dim", hidden // heads),
                          intermediate=f.integer("intermediate_size"), rope_theta=f.number("rope_theta", 10000.0),
                          norm_eps=f.number("rms_norm_eps", 1e-6), max_positions=f.integer("max_position_embeddings", 32768),
                          latent_grid=latent_grid, timestep_features=features, vocab_kind="qwen")


def parse_vit_config(raw: dict[str, Any], path: Path, name: str, llm_hidden: int, first: ResizeRule) -> VitConfig:
    """VitConfig from vit_config.json: one layer fewer than `num_hidden_layers` (BAGEL drops the last),
    the position grid image_size / patch_size, the resize bounds of the preset with that grid."""
    f = _Fields(raw, path)
    f.one_of("hidden_act", ("gelu_pytorch_tanh", "gelu_tanh"))
    f.one_of("num_channels", (3,))
    patch, image = f.integer("patch_size"), f.integer("image_size")
    if image % patch:
        raise WeightsError(f"{path}: image_size {image} is not a multiple of patch_size {patch}")
    grid = image // patch
    preset = VIT_RESIZES.get(grid)
    resize = Resize.preset(preset) if preset else Resize(image, patch * max(1, grid * 16 // 70), patch, image * image)
    try:
        return VitConfig(name, hidden=f.integer("hidden_size"), layers=f.integer("num_hidden_layers", least=2) - 1,
                         heads=f.integer("num_attention_heads"), intermediate=f.integer("intermediate_size"), patch=patch,
                         grid=grid, llm_hidden=llm_hidden, resize=resize, first=first,
                         eps=f.number("layer_norm_eps", 1e-6))
    except WeightsError:
        raise
    except ValueError as err:  # VitConfig's own checks (heads dividing the width, ...)
        raise WeightsError(f"{path}: {err}") from None
