"""For the `gpu` tests of the engines: FlashInfer's attention class, or a skip saying what is missing."""

from __future__ import annotations

from typing import Any

import pytest
import torch


def flashinfer_attention() -> Any:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("flashinfer")
    from wgc.runtime.engines.attention_cuda import FlashInferAttention

    return FlashInferAttention
