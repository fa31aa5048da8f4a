"""Servers shared by the HTTP tests: each starts once per module that uses it and is stopped after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.http.server import API_KEY, ROOT, TOY, Server, compile_plan


@pytest.fixture(scope="session")
def toy_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_plan(tmp_path_factory.mktemp("plans"), TOY)


@pytest.fixture(scope="session")
def bagel_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_plan(tmp_path_factory.mktemp("plans"), ROOT / "models" / "bagel.walk")


@pytest.fixture(scope="session")
def qwen3_omni_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_plan(tmp_path_factory.mktemp("plans"), ROOT / "models" / "qwen3_omni.walk")


@pytest.fixture(scope="session")
def orpheus_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_plan(tmp_path_factory.mktemp("plans"), ROOT / "models" / "orpheus.walk")


@pytest.fixture(scope="session")
def toy(toy_plan: Path) -> Iterator[Server]:
    """The toy model with an API key and room for 64 requests at once."""
    server = Server(toy_plan, "--api-key", API_KEY, "--max-running", "64", "--max-queued", "64")
    yield server
    assert server.stop() == 128 + 15  # SIGTERM: a clean stop


@pytest.fixture()
def headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {API_KEY}"}
