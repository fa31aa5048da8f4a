"""Where `wgc run --serve` takes its API key from: --api-key-file, WGC_API_KEY, or --api-key, which
warns that a command line is visible to other users (`ps`). Through the CLI and a real server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.http.server import Server

WARNING = "--api-key is visible to other users"


def _answers(server: Server, key: str) -> tuple[int, int, int]:
    """Status of /v1/models with no key, a wrong key and `key`."""
    url = f"{server.url}/v1/models"
    codes = [httpx.get(url, timeout=10).status_code]
    codes += [httpx.get(url, headers={"Authorization": f"Bearer {k}"}, timeout=10).status_code for k in ("nope", key)]
    return codes[0], codes[1], codes[2]


def _environ(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")


def test_the_key_from_a_file(tmp_path: Path, toy_plan: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("file-secret\n")  # the trailing newline an editor or `echo` leaves is not part of it
    server = Server(toy_plan, "--api-key-file", str(key_file))
    try:
        assert _answers(server, "file-secret") == (401, 401, 200)
    finally:
        server.stop()
    assert WARNING not in server.errors()


def test_the_key_from_the_environment_stays_out_of_the_workers(toy_plan: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WGC_API_KEY", "env-secret")
    server = Server(toy_plan)
    try:
        assert _answers(server, "env-secret") == (401, 401, 200)
        assert not any(v.startswith("WGC_API_KEY=") for pid in server.worker_pids for v in _environ(pid))
    finally:
        server.stop()
    assert WARNING not in server.errors()


def test_the_key_on_the_command_line_still_works_and_warns_once(toy_plan: Path) -> None:
    server = Server(toy_plan, "--api-key", "argv-secret")
    try:
        assert _answers(server, "argv-secret") == (401, 401, 200)
    finally:
        server.stop()
    warnings = [line for line in server.errors().splitlines() if WARNING in line]
    assert len(warnings) == 1 and "--api-key-file" in warnings[0] and "WGC_API_KEY" in warnings[0]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wgc", "run", *args], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(("args", "message"), [
    (["--serve", ":0", "--api-key", "k", "--api-key-file", "{key}"], "--api-key and --api-key-file do not go together"),
    (["--serve", ":0", "--api-key-file", "{missing}"], "--api-key-file {missing}: cannot read it: No such file"),
    (["--serve", ":0", "--api-key-file", "{empty}"], "--api-key-file {empty}: the file holds no key"),
    (["--serve", ":0", "--api-key-file", "{two}"], "--api-key-file {two}: the key is one line"),
    (["--serve", ":0", "--api-key", ""], "--api-key: the key is empty"),
    (["--api-key-file", "{key}"], "--api-key, --api-key-file, --max-running and --max-queued need --serve"),
])
def test_a_bad_key_source_is_a_usage_error_in_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    files = {"key": "k\n", "empty": " \n", "two": "a\nb\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    names = {name: str(tmp_path / name) for name in (*files, "missing")}
    done = _cli(str(tmp_path / "x.plan"), *[a.format(**names) for a in args])
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert message.format(**names) in done.stderr, done.stderr
