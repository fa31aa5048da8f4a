"""Hooks a model's component module may define for the frontend, looked up by name.

    tokenizer(spec: ComponentSpec) -> Tokenizer   on the module of the component that emits text
    sample_rate(spec: ComponentSpec) -> int       on the module of the component that emits audio
    voices(spec: ComponentSpec) -> Sequence[str]   ditto: the voices it has (a checkpoint's speakers;
                                                  outputs.voices narrows the voice param's choices to them)

With fake components no module is imported (fakes need none, and a model may have no module yet).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from wgc.plan.model import ComponentSpec


def component_hook(spec: ComponentSpec | None, name: str, fake: bool) -> Callable[[ComponentSpec], Any] | None:
    if spec is None or fake:
        return None
    try:
        module = importlib.import_module(spec.cls.rpartition(".")[0])
    except ImportError:
        return None  # the workers report an unimportable component; the frontend falls back
    hook = getattr(module, name, None)
    return hook if callable(hook) else None
