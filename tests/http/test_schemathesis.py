"""schemathesis against the served OpenAPI document with every conformance check on: no 5xx, every
status, content type, header and body as the document says, schema-valid requests accepted (ST202)
and schema-violating ones refused (ST201). For the toy plan, the tiny Orpheus with its real components,
and BAGEL and Qwen3-Omni on fake components; bounded in examples and time.

The examples and fuzzing phases: they draw media from the generators tests/http/schemathesis_hooks.py
registers for the document's `format`s and content types (the coverage phase does not use them), and
keep generated bodies within the rules across fields that no schema can state. A 504 is allowed: it is
the answer to a request's own `timeout`, which the document lets a client set to one second.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.http.server import API_KEY, ROOT, Server

CONFIG = """\
[checks.not_a_server_error]
expected-statuses = ["1xx", "2xx", "3xx", "4xx", "504"]
"""
# plan fixture, server flags, the model's positions (the hooks' bound for a prompt with max_tokens)
PLANS = {
    "orpheus": ("orpheus_plan", (), 4096),
    "bagel": ("bagel_plan", ("--fake",), 32768),
    "qwen3_omni": ("qwen3_omni_plan", ("--fake",), 32768),
}


@pytest.fixture(params=["toy", *PLANS])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[Server, int, list[str]]]:
    if request.param == "toy":
        yield request.getfixturevalue("toy"), 0, ["--header", f"Authorization: Bearer {API_KEY}"]
        return
    fixture, flags, positions = PLANS[request.param]
    server = Server(request.getfixturevalue(fixture), *flags, ready_timeout=120)
    try:
        yield server, positions, []
    finally:
        server.stop()


def test_every_answer_matches_the_served_document(served: tuple[Server, int, list[str]], tmp_path: Path) -> None:
    cli = shutil.which("schemathesis") or shutil.which("st")
    if cli is None:
        pytest.skip("schemathesis is not installed (pip install -e .[test])")
    server, positions, extra = served
    (tmp_path / "schemathesis.toml").write_text(CONFIG)
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.http.schemathesis_hooks", "WGC_ST_POSITIONS": str(positions),
           "WGC_ST_MAX_TOKENS": "64", "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get(
               "PYTHONPATH", "")) if p)}
    run = subprocess.run([cli, "run", f"{server.url}/openapi.json", *extra, "--checks", "all",
                          "--phases", "examples,fuzzing", "--max-examples", "20", "--seed", "7",
                          "--request-timeout", "30", "--workers", "2", "--no-color"],
                         capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "Server error" not in run.stdout
