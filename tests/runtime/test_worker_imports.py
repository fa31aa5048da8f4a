"""What a worker may import: nothing from the working directory, only component modules under the
allowed prefixes, checked before anything is imported (runtime/process/modules.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from wgc.runtime.process.modules import ModuleRefused, allowed_prefixes, check_components, under, worker_env

from tests.runtime.cluster import compile_text, cpu_placement
from wgc.compile import compile_program
from wgc.plan.file import encode_plan
from wgc.plan.model import Setting

ROOT = Path(__file__).resolve().parents[2]
TRAP = """import pathlib
pathlib.Path({marker!r}).write_text("imported")
"""
EVIL = """
model evil
import evilmod as e
component c: e.Thing engine stateless {
    go() -> token
}
walk w() {
    x = c.go()
    emit text x
}
flow { start -> w -> done }
"""


def _cli(*args: str) -> list[str]:
    # -P: the command itself must not import from the working directory either; only its workers are tested
    return [sys.executable, "-P", "-c", "from wgc.cli.run_cmd import run; run()", *args]


def _orpheus(directory: Path) -> Path:
    source = ROOT / "models" / "orpheus.walk"
    result = compile_program(str(source), source.read_text(), str(ROOT / "placements" / "cpu.toml"))
    assert result.data is not None
    path = directory / "orpheus.plan"
    path.write_bytes(result.data)
    return path


def test_a_module_in_the_working_directory_is_not_imported_by_a_worker(tmp_path: Path) -> None:
    cwd, marker = tmp_path / "cwd", tmp_path / "marker"
    cwd.mkdir()
    (cwd / "msgspec.py").write_text(TRAP.format(marker=str(marker)))  # every worker imports msgspec
    plan = _orpheus(tmp_path)
    request = json.dumps({"params": {"max_tokens": 3}, "inputs": {"prompt": "hi"}})
    done = subprocess.run(_cli(str(plan), "--fake", "--request", request), cwd=cwd, capture_output=True, text=True,
                          timeout=60)
    assert not marker.exists(), "a worker imported msgspec.py from the working directory"
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["event"] == "done"


def test_the_workers_pythonpath_loses_its_empty_and_relative_entries() -> None:
    env = worker_env({"PYTHONPATH": os.pathsep.join(["", "/opt/models", ".", "src", "/srv/x"]), "HOME": "/h"})
    assert env == {"PYTHONPATH": os.pathsep.join(["/opt/models", "/srv/x"]), "HOME": "/h"}
    assert "PYTHONPATH" not in worker_env({"PYTHONPATH": ":."})


def _evil_plan(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A plan whose component class is evilmod.Thing, evilmod importable and writing a marker when imported."""
    modules, marker = tmp_path / "modules", tmp_path / "marker"
    modules.mkdir()
    (modules / "evilmod.py").write_text(TRAP.format(marker=str(marker)))
    path = tmp_path / "evil.plan"
    path.write_bytes(encode_plan(compile_text(tmp_path, EVIL, cpu_placement(1)), "", ""))
    return path, marker, {**os.environ, "PYTHONPATH": str(modules)}


@pytest.mark.parametrize("mode", [("--request", "{}"), ("--serve", "127.0.0.1:0")])
def test_a_plan_naming_a_module_outside_the_allowed_prefixes_is_refused_in_one_line(tmp_path: Path,
                                                                                     mode: tuple[str, str]) -> None:
    plan, marker, env = _evil_plan(tmp_path)
    done = subprocess.run(_cli(str(plan), *mode), capture_output=True, text=True, timeout=60, env=env)
    assert not marker.exists(), "the component module was imported before it was checked"
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert "component c: class evilmod.Thing is in module evilmod, outside the allowed module prefixes (wgc.models)" \
        in done.stderr and "--allow-module-prefix evilmod" in done.stderr


def test_a_worker_started_on_its_own_checks_the_prefixes_too(tmp_path: Path) -> None:
    plan, marker, env = _evil_plan(tmp_path)
    error = tmp_path / "rank0.error"
    done = subprocess.run([sys.executable, "-P", "-m", "wgc.runtime.process.worker_main", "--plan", str(plan),
                           "--rank", "0", "--coordinator", "ipc:///nonexistent/c", "--endpoints", "ipc:///nonexistent/0",
                           "--error-file", str(error), "--allow-module-prefix", "wgc.models"],
                          capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 3 and not marker.exists()
    assert "outside the allowed module prefixes (wgc.models)" in error.read_text()


def test_the_command_line_prefix_lets_the_module_in(tmp_path: Path) -> None:
    plan, marker, env = _evil_plan(tmp_path)
    done = subprocess.run(_cli(str(plan), "--allow-module-prefix", "evilmod", "--request", "{}"), capture_output=True,
                          text=True, timeout=60, env=env)
    assert marker.exists()  # imported by the worker: it has no component class, so the rank cannot start
    assert done.returncode == 1 and "evilmod has no Component subclass Thing" in done.stderr


def test_a_bad_prefix_on_the_command_line_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(_cli(str(tmp_path / "x.plan"), "--allow-module-prefix", "../x"), capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--allow-module-prefix" in done.stderr


def test_prefixes_match_whole_module_names() -> None:
    assert under("wgc.models.orpheus", ["wgc.models"]) and under("wgc.models", ["wgc.models"])
    assert not under("wgc.modelsx", ["wgc.models"]) and not under("wgc", ["wgc.models"])


def test_the_placement_adds_prefixes_and_the_command_line_replaces_them(tmp_path: Path) -> None:
    plan = compile_text(tmp_path, EVIL, cpu_placement(1, '[serve]\nallow_modules = ["evilmod", "other.pkg"]'))
    assert Setting("serve.allow_modules", "evilmod,other.pkg", "placement") in plan.settings
    assert allowed_prefixes(plan) == ("wgc.models", "evilmod", "other.pkg")
    check_components(plan, allowed_prefixes(plan))
    with pytest.raises(ModuleRefused, match="outside the allowed module prefixes \\(wgc.models\\)"):
        check_components(plan, allowed_prefixes(plan, ["wgc.models"]))
    check_components(plan, [], rank=1)  # nothing on rank 1


def test_a_class_that_is_not_a_module_path_is_refused(tmp_path: Path) -> None:
    plan = compile_text(tmp_path, EVIL, cpu_placement(1))
    odd = msgspec.structs.replace(plan.components[0], cls="os.path\n.X")
    with pytest.raises(ModuleRefused, match="is not a module path"):
        check_components(msgspec.structs.replace(plan, components=[odd]), ["os"])
