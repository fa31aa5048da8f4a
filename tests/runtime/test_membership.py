"""Multi-host facts in-process: what the plan carries per host, the endpoints and ports derived from it,
join validation, and the heartbeat detector under a fake clock."""

from __future__ import annotations

from pathlib import Path

from wgc.runtime.process import membership as mb
from wgc.runtime.process.endpoints import Endpoints, ports

from tests.runtime.hosts import compiled
from wgc.plan.file import load_plan
from wgc.plan.text import plan_text

ROOT = Path(__file__).resolve().parents[2]


def test_the_plan_carries_each_host_its_address_and_environment(tmp_path: Path) -> None:
    extra = '[[cluster.hosts]]\nname = "a"\naddress = "127.0.0.2"\nranks = [0, 1]\nenv = {NCCL_SOCKET_IFNAME = "lo"}\n' \
            '[[cluster.hosts]]\nname = "b"\naddress = "127.0.0.3"\nranks = [2, 3]\n'
    own = tmp_path / "four.toml"
    own.write_text(f'extends = "{ROOT / "placements" / "3xh100.toml"}"\n[cluster]\nranks = 4\n{extra}'
                   "[transport]\nport = 31000\n")
    from wgc.compile import compile_program

    source = ROOT / "models" / "bagel.walk"
    result = compile_program(str(source), source.read_text(), str(own))
    assert result.data is not None, [d.message for d in result.diagnostics]
    plan = load_plan_bytes(tmp_path, result.data)
    assert [(h.name, h.address, h.ranks) for h in plan.hosts] == [("a", "127.0.0.2", [0, 1]), ("b", "127.0.0.3", [2, 3])]
    assert plan.hosts[0].env == {"NCCL_SOCKET_IFNAME": "lo"} and plan.hosts[1].env == {}
    # CUDA devices are numbered per host: rank 2 is the first GPU of host b
    assert [r.device for r in plan.ranks] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert plan.transport is not None and plan.transport.port == 31000


def load_plan_bytes(tmp_path: Path, data: bytes):  # type: ignore[no-untyped-def]
    path = tmp_path / "p.plan"
    path.write_bytes(data)
    return load_plan(path)[1]


def test_endpoints_are_ipc_on_the_own_host_and_tcp_from_the_own_address_to_others(tmp_path: Path) -> None:
    plan = load_plan(compiled(tmp_path, "bagel", "cpu3-hosts.toml", port=30000))[1]
    assert ports(plan).rank(2) == 30012 and ports(plan).coordinator == 30001
    node1 = Endpoints.for_host(plan, 1, "/run/x")
    assert node1.ranks == ("tcp://127.0.0.3:0;127.0.0.2:30010", "ipc:///run/x/rank1", "tcp://127.0.0.3:0;127.0.0.4:30012")
    assert node1.coordinator == "tcp://127.0.0.3:0;127.0.0.2:30001"
    assert node1.binds_of_rank(1) == ("ipc:///run/x/rank1", "tcp://127.0.0.3:30011")  # its own address, not *
    head = Endpoints.for_host(plan, 0, "/run/h")
    assert head.coordinator == "ipc:///run/h/coordinator"
    assert head.binds_of_coordinator() == ("ipc:///run/h/coordinator", "tcp://127.0.0.2:30001")


def test_one_host_keeps_ipc_only(tmp_path: Path) -> None:
    plan = load_plan(compiled(tmp_path, "bagel", "cpu3.toml"))[1]
    ep = Endpoints.for_host(plan, 0, "/d")
    assert ep == Endpoints.in_directory("/d", 3)
    assert all(e.startswith("ipc://") for e in (*ep.ranks, ep.coordinator))


def test_inspect_shows_hosts_and_ports(tmp_path: Path) -> None:
    text = plan_text(load_plan(compiled(tmp_path, "bagel", "cpu3-hosts.toml", port=30000))[1])
    assert "node2 (node rank 2)  127.0.0.4  ranks [2]  ports 30012" in text
    assert "store 30000, coordinator 30001, membership 30002" in text


def test_inspect_shows_the_tensor_parallel_groups(tmp_path: Path) -> None:
    text = plan_text(load_plan(compiled(tmp_path, "orpheus", "orpheus-tp2-hosts.toml"))[1])
    assert "tensor-parallel groups: (gloo, inter_host gloo)\n  llm: ranks [0, 1]" in text
    assert "tensor-parallel" not in plan_text(load_plan(compiled(tmp_path, "orpheus", "orpheus-cpu2.toml"))[1])


def test_joins_are_refused_in_one_line_naming_the_host() -> None:
    names, sha, version = ["node0", "node1", "node2"], "a" * 64, "1.0"

    def problem(**change: object) -> str | None:
        join = mb.Join(**{"node_rank": 1, "host": "node1", "plan_sha256": sha, "version": version, "pid": 7, **change})
        return mb.join_problem(join, 3, names, sha, version)

    assert problem() is None
    assert "host node1 has a different plan" in str(problem(plan_sha256="b" * 64))
    assert "host node1 runs wgc 0.9, the head runs wgc 1.0" in str(problem(version="0.9"))
    assert "node rank 3 (node1) is not a host of this plan" in str(problem(node_rank=3))
    assert "not a host" in str(problem(node_rank=0))  # 0 is the head
    assert "node rank 1 is host node1 in the head's plan, not node2" in str(problem(host="node2"))
    for p in (problem(plan_sha256="b" * 64), problem(version="0.9")):
        assert p is not None and "\n" not in p


def test_a_silent_peer_is_down_once_and_stays_down() -> None:
    live = mb.Liveness(timeout=2.0)
    live.heard(1, 0.0)
    live.heard(2, 0.0)
    assert live.expired(1.9) == []
    live.heard(2, 1.9)
    assert live.expired(2.5) == [(1, 2.5)]  # 2.5 s silent: down; host 2 spoke 0.6 s ago
    assert live.expired(3.0) == []  # declared once
    assert not live.heard(1, 3.1)  # a fenced host's later beats are refused
    assert live.expired(10.0) == [(2, 8.1)]


def test_a_host_fences_itself_only_after_the_head_has_declared_it_down() -> None:
    assert mb.fence_after(3.0) == 4.5 and mb.fence_after(1.0) == 2.0
    assert all(mb.fence_after(t) > t + mb.HEARTBEAT_S for t in (0.5, 2.0, 10.0))


def test_strangers_bytes_are_not_messages() -> None:
    assert mb.decode(b"\x00garbage") is None
    assert mb.decode(mb.encode(mb.Beat(5, 1))) == mb.Beat(5, 1)
