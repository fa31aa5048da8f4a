"""SVG through Graphviz: the DOT text piped into `dot -Tsvg`."""

from __future__ import annotations

import shutil
import subprocess

DOT_TIMEOUT_S = 120


class GraphvizError(Exception):
    """Graphviz is missing or failed; the message is one line for the user."""


def dot_to_svg(dot_text: str) -> bytes:
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizError("SVG output needs Graphviz's `dot`: install graphviz (apt-get install graphviz), "
                            "or write .dot instead")
    try:
        proc = subprocess.run([exe, "-Tsvg"], input=dot_text.encode("utf-8"), capture_output=True,
                              timeout=DOT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise GraphvizError(f"running {exe} failed: {err}") from err
    if proc.returncode != 0:
        detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GraphvizError(f"{exe} -Tsvg failed: {detail[0] if detail else f'exit status {proc.returncode}'}")
    return proc.stdout
