"""A bench script (bench/*.py, not a package) imported for a test, under its own module name while
the test uses it (dataclasses look their module up in sys.modules while a class is built)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType


@contextmanager
def loaded_bench(path: Path, name: str) -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
