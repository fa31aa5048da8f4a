"""A stand-in for `safetensors.safe_open` that hands everything to the real one, for tests that
watch what a loader fetches: a subclass sees each slice handle (`sliced`) and each whole tensor
(`fetched`) and may count, check or wrap it."""

from __future__ import annotations

from typing import Any

from safetensors import safe_open
from torch import Tensor


class SafeOpenProxy:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.inner = safe_open(*args, **kwargs)

    def __enter__(self) -> SafeOpenProxy:
        self.file = self.inner.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.inner.__exit__(*exc)

    def keys(self) -> list[str]:
        return self.file.keys()

    def get_slice(self, name: str) -> Any:
        return self.sliced(name, self.file.get_slice(name))

    def get_tensor(self, name: str) -> Tensor:
        return self.fetched(name, self.file.get_tensor(name))

    def sliced(self, name: str, piece: Any) -> Any:
        return piece

    def fetched(self, name: str, tensor: Tensor) -> Tensor:
        return tensor
