"""The whole tree is ruff-clean: lint runs as part of the test command, so CI enforces it."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean() -> None:
    if shutil.which("ruff") is None:
        pytest.fail("ruff is not installed: it is part of the `test` extra")
    result = subprocess.run([sys.executable, "-m", "ruff", "check", str(ROOT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
