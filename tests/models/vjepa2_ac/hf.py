"""transformers' VJEPA2Model at the tiny preset's sizes, with livelier random weights, and the same
weights in the components (their parameters carry transformers' names)."""

from __future__ import annotations

from functools import cache

import torch
from transformers import VJEPA2Config, VJEPA2Model
from wgc.models.vjepa2_ac import Encoder, MaskedPredictor

from tests.models.vjepa2_ac.helpers import lively, spec


def hf_config() -> VJEPA2Config:
    return VJEPA2Config(hidden_size=96, num_hidden_layers=2, num_attention_heads=2, crop_size=64, frames_per_clip=4,
                        pred_hidden_size=48, pred_num_hidden_layers=2, pred_num_attention_heads=2,
                        pred_num_mask_tokens=2)


@cache
def hf_model() -> VJEPA2Model:
    model = VJEPA2Model(hf_config()).eval()
    lively(model, seed=11)
    return model


def with_hf_weights(component: Encoder | MaskedPredictor, prefix: str) -> None:
    state = {k[len(prefix):]: v for k, v in hf_model().state_dict().items() if k.startswith(prefix)}
    component.net.load_state_dict(state, strict=True)


def tiny_encoder() -> Encoder:
    enc = Encoder(spec("encoder", "Encoder", "stateless"), 0, "cpu", preset="tiny")
    with_hf_weights(enc, "encoder.")
    return enc


def tiny_masked() -> MaskedPredictor:
    pred = MaskedPredictor(spec("predictor", "MaskedPredictor", "stateless"), 0, "cpu", preset="tiny")
    with_hf_weights(pred, "predictor.")
    return pred


def hf_encode(pixels: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return hf_model()(pixels, skip_predictor=True).last_hidden_state
