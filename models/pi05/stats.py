"""The state's normalisation and the actions' unnormalisation with a checkpoint's quantile statistics
(lerobot's QUANTILES mode: x' = 2 (x - q01) / (q99 - q01) - 1, a zero span replaced by 1e-8, no
clipping; the inverse for actions). The state is then zero-padded to the model's width; of the
model's action dims only the first `action_dim` (the statistics' width) leave as actions.

Without statistics (the tiny preset, a checkpoint without processor files) both maps are the
identity over `state_dim` and `action_dim` values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

EPS = 1e-8


@dataclass(frozen=True)
class Quantiles:
    low: Tensor  # [n] q01
    high: Tensor  # [n] q99

    @property
    def span(self) -> Tensor:
        span = self.high - self.low  # [n]
        return torch.where(span == 0, torch.full_like(span, EPS), span)


@dataclass(frozen=True)
class Stats:
    state_dim: int
    action_dim: int
    state: Quantiles | None = None
    action: Quantiles | None = None
    source: str = "identity"

    @staticmethod
    def identity(state_dim: int, action_dim: int) -> Stats:
        return Stats(state_dim, action_dim)

    def normalize_state(self, state: Tensor, width: int) -> Tensor:
        """Raw state [state_dim] -> normalised and zero-padded [width] float32."""
        x = state.float()
        if self.state is not None:
            x = 2.0 * (x - self.state.low) / self.state.span - 1.0  # [state_dim]
        return torch.cat([x, x.new_zeros(width - x.shape[0])])  # [width]

    def actions(self, x: Tensor) -> Tensor:
        """Model actions [chunk, width] -> unnormalised [chunk, action_dim] float32."""
        a = x[:, : self.action_dim].float()  # [chunk, action_dim]
        if self.action is None:
            return a
        return (a + 1.0) * self.action.span / 2.0 + self.action.low  # [chunk, action_dim]
