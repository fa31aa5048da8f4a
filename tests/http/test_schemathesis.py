"""A bounded schemathesis run against the served OpenAPI document: no 5xx, and answers that match it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.http.server import API_KEY, Server

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def test_fuzzing_the_openapi_document_finds_no_server_error(toy: Server, tmp_path: Path) -> None:
    cli = shutil.which("schemathesis") or shutil.which("st")
    if cli is None:
        pytest.skip("schemathesis is not installed (pip install -e .[test])")
    run = subprocess.run([cli, "run", f"{toy.url}/openapi.json", "--header", f"Authorization: Bearer {API_KEY}",
                          "--checks", CHECKS, "--phases", "examples,fuzzing", "--max-examples", "12",
                          "--seed", "7", "--request-timeout", "20", "--workers", "2", "--no-color"],
                         capture_output=True, text=True, timeout=75, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "Server error" not in run.stdout
