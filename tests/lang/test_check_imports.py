"""`wgc check` stays a small process: it parses and checks, and imports nothing it doesn't need —
no torch, no runtime, no server, no other subcommand's module (the cold-start goal depends on it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, sys
from wgc.cli.main import main
sys.argv = ["wgc", "check", sys.argv[1]]
try:
    main()
except SystemExit as done:
    code = done.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def test_wgc_check_imports_no_torch_runtime_server_or_other_subcommand() -> None:
    result = subprocess.run([sys.executable, "-c", _PROBE, str(ROOT / "models" / "bagel.walk")],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    report = json.loads(result.stderr.strip().splitlines()[-1])
    assert report["code"] in (0, None), result.stderr
    modules = set(report["modules"])
    assert "wgc.check" in modules and "wgc.cli.check_cmd" in modules  # the probe did run the check
    heavy = {"torch", "numpy", "zmq", "fastapi", "uvicorn", "pygls", "transformers", "snac"}
    assert not {m.split(".")[0] for m in modules} & heavy
    assert not {m for m in modules if m.startswith(("wgc.runtime", "wgc.models", "wgc.lower", "wgc.lsp"))}
    others = {"wgc.cli.run_cmd", "wgc.cli.compile_cmd", "wgc.cli.graph_cmd", "wgc.cli.inspect_cmd",
              "wgc.cli.lsp_cmd", "wgc.cli.fmt_cmd"}
    assert not modules & others
