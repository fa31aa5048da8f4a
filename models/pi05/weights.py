"""Real π0.5 (and π0) weights from a local `lerobot/pi05_base`-layout directory (models-wave2.md §4.7):

    config.json          lerobot's PI05Config ("type": "pi05", or "pi0"): chunk_size, max_state_dim,
                         max_action_dim, num_inference_steps, tokenizer_max_length, image_resolution,
                         paligemma_variant, action_expert_variant
    model.safetensors    (or shards with model.safetensors.index.json) lerobot's names, with or
                         without an outer `model.` (transformers' older PaliGemma names, from
                         conversions before 4.52, are read too: `paligemma.language_model.model.*`):
        paligemma_with_expert.paligemma.model.vision_tower.vision_model.*     SigLIP
        paligemma_with_expert.paligemma.model.multi_modal_projector.linear.*  projector
        paligemma_with_expert.paligemma.model.language_model.{layers.*, norm.weight}   Gemma-2B
        paligemma_with_expert.paligemma.lm_head.weight                        the (tied) embedding
        paligemma_with_expert.gemma_expert.model.{layers.*, norm.*}          the expert (adaRMS
                                                                              `*.dense.*` in π0.5)
        action_in_proj, action_out_proj, time_mlp_in, time_mlp_out           (π0: state_proj,
                                                                              action_time_mlp_in/out)
    tokenizer.json       PaliGemma's (google/paligemma-3b-pt-224's; lerobot fetches it separately,
                         so copy it beside the weights)
    policy_preprocessor*.safetensors / policy_postprocessor*.safetensors  the normaliser's
                         statistics: `observation.state.{q01,q99}` and `action.{q01,q99}`
                         (absent: identity over max_state_dim / max_action_dim, logged)

Widths, depths, MLP sizes and the vocabulary are read off the header; the head geometry, which no
shape shows, comes from the variants (gemma_2b and gemma_300m: 8 query heads, 1 KV head of 256;
SigLIP So400m/14: heads of 72). Unused tensors (the expert's lm_head and embed_tokens, a stored
language embed_tokens beside lm_head) are skipped; any other unknown name is an error. Every
problem is one WeightsError line naming the file and the tensor; tensors are read once, each
straight into its parameter of a meta-built model. Given a tensor-parallel group, the prefix and the
expert are cut on the meta device (layers/tp_shard.py) and each rank reads only its parts: slices of
the split tensors, never one whole (the action heads, small, are read whole on every rank).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from tokenizers import Tokenizer
from torch import nn
from wgc.models.layers.config import LlamaConfig
from wgc.models.layers.llama import LlamaModel
from wgc.models.layers.tensor_parallel import shard_structure as shard_llama_structure
from wgc.models.layers.tp_modules import Group
from wgc.models.layers.tp_shard import shard_reads, shard_structure
from wgc.models.pi05.config import Pi05Config, SiglipConfig
from wgc.models.pi05.expert import ActionExpert, ActionHeads
from wgc.models.pi05.prompt import load_tokenizer
from wgc.models.pi05.stats import Quantiles, Stats
from wgc.models.pi05.vision import Tower
from wgc.models.weights_io import (
    Found,
    Part,
    WeightsError,
    allocate,
    check_tensors,
    load_tensors,
    meta_module,
    one_line,
    read_checkpoint,
    read_json,
)

CONFIG = "config.json"
PALI = "paligemma_with_expert.paligemma."
VISION = PALI + "model."  # + vision_tower.* / multi_modal_projector.*
LANGUAGE = PALI + "model.language_model."
EMBEDDING = PALI + "lm_head.weight"
EXPERT = "paligemma_with_expert.gemma_expert.model."
UNUSED = ("paligemma_with_expert.gemma_expert.lm_head.", EXPERT + "embed_tokens.", LANGUAGE + "embed_tokens.")
OLDER = ((PALI + "language_model.model.", LANGUAGE), (PALI + "language_model.lm_head.", PALI + "lm_head."),
         (PALI + "vision_tower.", VISION + "vision_tower."),
         (PALI + "multi_modal_projector.", VISION + "multi_modal_projector."))
VARIANTS = {"gemma_2b": (8, 1, 256), "gemma_300m": (8, 1, 256)}  # (heads, kv_heads, head_dim)
SIGLIP_HEAD_DIM = 72
log = logging.getLogger("wgc.models.pi05")


def checkpoint_name(part: str) -> Callable[[str], str]:
    """Our parameter name -> the checkpoint's, for each part: "tower", "prefix", "expert", "heads"."""
    return {"tower": lambda n: VISION + n, "prefix": lambda n: EMBEDDING if n == "embed_tokens.weight" else LANGUAGE + n,
            "expert": lambda n: EXPERT + n, "heads": lambda n: n}[part]


def _current(name: str) -> str:
    """A checkpoint name in transformers' newer PaliGemma layout (>= 4.52: `paligemma.model.*` and
    `paligemma.lm_head`); checkpoints converted with the older one (`paligemma.language_model.model.*`,
    `paligemma.vision_tower.*`, `paligemma.language_model.lm_head`) are read the same."""
    for old, new in OLDER:
        if name.startswith(old):
            return new + name[len(old):]
    return name


def _layers(found: Found, prefix: str) -> int:
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    return 1 + max((int(m.group(1)) for n in found if (m := pattern.match(n))), default=-1)


class Checkpoint:
    """One directory: its config, header and statistics read once; each component takes its part."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise WeightsError(f"{self.directory}: not a directory (a lerobot pi05_base-layout checkpoint)")
        self.raw = read_json(self.directory / CONFIG, f"{self.directory / CONFIG}: missing (lerobot's PI05Config)")
        found = read_checkpoint(self.directory)
        outer = "model." if found and all(n.startswith("model.") for n in found) else ""
        self.stored = {_current(n.removeprefix(outer)): n for n in found}  # our reading of a name -> the file's
        if len(self.stored) != len(found):
            raise WeightsError(f"{self._first(found)}: a tensor is stored under both the older and the newer "
                               "transformers name (paligemma.language_model.model.* and paligemma.model.language_model.*)")
        self.found: dict[str, Any] = {n: found[stored] for n, stored in self.stored.items()}
        self.config = self._config()

    # ---- the config --------------------------------------------------------------------------

    def _entry(self, name: str) -> Any:
        entry = self.found.get(name)
        if entry is None:
            where = next(iter(self.found.values())).path if self.found else self.directory
            raise WeightsError(f"{where}: missing tensor {name}")
        return entry

    def _int(self, key: str, default: int) -> int:
        value = self.raw.get(key, default)
        if isinstance(value, list) and value:
            value = value[0]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise WeightsError(f"{self.directory / CONFIG}: {key} must be a positive integer, found {value!r}")
        return value

    def _variant(self, key: str, default: str) -> tuple[int, int, int]:
        name = self.raw.get(key, default)
        if name not in VARIANTS:
            raise WeightsError(f"{self.directory / CONFIG}: {key} {name!r} is not known (known: {', '.join(VARIANTS)})")
        return VARIANTS[name]

    def _gemma(self, prefix: str, vocab: int, variant: tuple[int, int, int]) -> LlamaConfig:
        heads, kv_heads, head_dim = variant
        mlp = self._entry(prefix + "layers.0.mlp.gate_proj.weight").shape
        return LlamaConfig.gemma(vocab=vocab, hidden=mlp[1], layers=_layers(self.found, prefix + "layers."),
                                 heads=heads, kv_heads=kv_heads, head_dim=head_dim, intermediate=mlp[0])

    def _config(self) -> Pi05Config:
        kind = self.raw.get("type", "pi05")
        if kind not in ("pi05", "pi0"):
            raise WeightsError(f"{self.directory / CONFIG}: type {kind!r} is neither pi05 nor pi0")
        patch = self._entry(VISION + "vision_tower.vision_model.embeddings.patch_embedding.weight").shape
        fc1 = self._entry(VISION + "vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight").shape
        projector = self._entry(VISION + "multi_modal_projector.linear.weight").shape
        vision = SiglipConfig(hidden=patch[0], layers=_layers(self.found, VISION + "vision_tower.vision_model.encoder.layers."),
                              heads=max(1, patch[0] // SIGLIP_HEAD_DIM), intermediate=fc1[0],
                              image_size=self._int("image_resolution", 224), patch=patch[2], projection=projector[0])
        vocab = self._entry(EMBEDDING).shape[0]
        prefix = self._gemma(LANGUAGE, vocab, self._variant("paligemma_variant", "gemma_2b"))
        expert = self._gemma(EXPERT, vocab, self._variant("action_expert_variant", "gemma_300m"))
        base = Pi05Config("checkpoint", vision, prefix, expert, chunk=self._int("chunk_size", 50),
                          action_dim=self._int("max_action_dim", 32), steps=self._int("num_inference_steps", 10),
                          max_prompt_tokens=self._int("tokenizer_max_length", 200 if kind == "pi05" else 48))
        try:
            return replace(base, name=str(self.directory.name), pi05=kind == "pi05")
        except ValueError as err:
            raise WeightsError(f"{self.directory}: {err}") from None

    # ---- the parts ---------------------------------------------------------------------------

    def _load(self, module: nn.Module, part_name: str, device: torch.device, dtype: torch.dtype,
              group: Group | None = None) -> nn.Module:
        """Check the part's (whole) tensors, cut to `group`'s shard if given, allocate, read each tensor
        (or the shard's part of it) once."""
        name = checkpoint_name(part_name)
        expected = {name(n): tuple(p.shape) for n, p in module.named_parameters()}
        part = {n: e for n, e in self.found.items() if n in expected}
        check_tensors(part, expected, self._file())
        cuts: dict[str, Part] = {}
        if group is not None and group.size > 1:  # the LlamaModel's config becomes its shard's too
            cuts = shard_llama_structure(module, group) if isinstance(module, LlamaModel) else \
                shard_structure(module, group)
        module = allocate(module, device, dtype)
        if isinstance(module, LlamaModel):  # allocating each module's parameters apart unties the head
            module.lm_head.weight = module.embed_tokens.weight
        targets, parts = shard_reads(module, cuts, name)
        load_tensors({self.stored[n]: t for n, t in targets.items()}, {self.stored[n]: e for n, e in part.items()},
                     {self.stored[n]: cut for n, cut in parts.items()})
        return module.eval()

    def _file(self) -> Path:
        return self._first(self.found)

    def _first(self, found: Found) -> Path:
        return next(iter(found.values())).path if found else self.directory

    def check_unexpected(self) -> None:
        """Every tensor belongs to some part or is known to be unused."""
        c = self.config
        known: set[str] = set()
        for module, part in ((meta_module(lambda: Tower(c.vision)), "tower"),
                             (meta_module(lambda: LlamaModel(c.prefix)), "prefix"),
                             (meta_module(lambda: ActionExpert(c)), "expert"),
                             (meta_module(lambda: ActionHeads(c)), "heads")):
            name = checkpoint_name(part)
            known.update(name(n) for n, _ in module.named_parameters())
        unexpected = [n for n in self.found if n not in known and not n.startswith(UNUSED)]
        if unexpected:
            check_tensors({n: self.found[n] for n in unexpected}, {}, self._file())

    def tower(self, device: torch.device, dtype: torch.dtype) -> Tower:
        self.check_unexpected()
        module = meta_module(lambda: Tower(self.config.vision))
        return self._load(module, "tower", device, dtype)  # type: ignore[return-value]

    def language(self, device: torch.device, dtype: torch.dtype,
                 group: Group | None = None) -> tuple[LlamaModel, ActionExpert, ActionHeads]:
        """The prefix, the expert and the heads; given a group of more than one rank, rank group.rank's
        shard of the prefix and the expert, read as its parts only (the heads whole)."""
        self.check_unexpected()
        c = self.config
        prefix = meta_module(lambda: LlamaModel(c.prefix))
        expert = meta_module(lambda: ActionExpert(c))
        heads = meta_module(lambda: ActionHeads(c))
        return (self._load(prefix, "prefix", device, dtype, group),  # type: ignore[return-value]
                self._load(expert, "expert", device, dtype, group), self._load(heads, "heads", device, dtype))

    def tokenizer(self) -> Tokenizer:
        try:
            return load_tokenizer(self.directory)
        except (FileNotFoundError, ValueError) as err:
            raise WeightsError(str(err)) from None

    # ---- statistics --------------------------------------------------------------------------

    @cached_property
    def stats(self) -> Stats:
        c = self.config
        state = self._quantiles("policy_preprocessor*.safetensors", "observation.state")
        action = self._quantiles("policy_postprocessor*.safetensors", "action")
        if state is None or action is None:
            log.warning("pi05 %s: no normalisation statistics for %s (policy_*processor*.safetensors): identity",
                        self.directory, "the state" if state is None else "the actions")
        state_dim = c.action_dim if state is None else int(state.low.shape[0])
        action_dim = c.action_dim if action is None else int(action.low.shape[0])
        for what, dim in (("state", state_dim), ("action", action_dim)):
            if dim > c.action_dim:
                raise WeightsError(f"{self.directory}: the {what} statistics have {dim} dims, more than the model's "
                                   f"{c.action_dim}")
        return Stats(state_dim, action_dim, state, action, "checkpoint" if state and action else "partly identity")

    def _quantiles(self, pattern: str, key: str) -> Quantiles | None:
        for path in sorted(self.directory.glob(pattern)):
            try:
                with safe_open(str(path), framework="pt") as f:
                    names = set(f.keys())
                    if f"{key}.q01" not in names:
                        continue
                    if f"{key}.q99" not in names:
                        raise WeightsError(f"{path}: {key}.q01 without {key}.q99")
                    low, high = f.get_tensor(f"{key}.q01").float(), f.get_tensor(f"{key}.q99").float()
            except WeightsError:
                raise
            except Exception as err:  # noqa: BLE001 - safetensors raises its own and OSError for a bad file
                raise WeightsError(f"{path}: not a readable statistics file ({one_line(err)})") from None
            if low.dim() != 1 or low.shape != high.shape:
                raise WeightsError(f"{path}: {key}.q01 {list(low.shape)} and q99 {list(high.shape)} must be one "
                                   f"vector each of the same length")
            return Quantiles(low, high)
        return None
