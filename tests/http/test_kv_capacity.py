"""Running slots from the KV pools the ranks report, through a real server: the tiny Orpheus with a
small pool sizes its slots by the pool; a plan without kv components keeps the max_batch rule."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.http.server import ROOT, Server, compile_plan

SMALL_POOL = """
[cluster]
device = "cpu"
ranks = 1
[defaults]
ranks = 0
engine = { kv_memory = "12MiB", max_batch = 8 }
"""

NO_KV = """
model plain
import tests.http.toys as toys
param seed: int = 0 in 0..1000
component painter: toys.Painter engine stateless {
    latent(seed: scalar) -> tensor[3; i64]
}
walk act() {
    emit tensor painter.latent(seed)
}
flow { start -> act -> done }
"""


@pytest.fixture(scope="module")
def orpheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("kv")
    (tmp / "small.toml").write_text(SMALL_POOL)
    server = Server(compile_plan(tmp, ROOT / "models" / "orpheus.walk", str(tmp / "small.toml")), ready_timeout=120)
    yield server
    server.stop()


def speak(server: Server, i: int) -> int:
    body = {"model": "orpheus", "voice": "tara", "input": f"number {i}", "response_format": "pcm",
            "params": {"max_tokens": 28}}
    return httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=120).status_code


def test_the_slots_follow_the_kv_pool(orpheus: Server) -> None:
    health = httpx.get(f"{orpheus.url}/health").json()
    pages = health["ranks"][0]["counters"]["llm.kv_pages"]
    # llm: max_seq_len 8192 capped at the 2048-token default context, one label; page_size 16.
    running = max(1, pages * 16 // 2048)
    assert running == 3 < 8  # the pool, not max_batch = 8
    assert health["capacity"]["source"] == "kv_pool" and "llm" in health["capacity"]["detail"]
    assert (health["capacity"]["running"], health["capacity"]["queued"]) == (running, 4 * running)
    assert orpheus.ready["capacity"] == health["capacity"]  # the start-up line says the same


def test_requests_beyond_the_slots_wait_and_complete(orpheus: Server) -> None:
    with ThreadPoolExecutor(5) as pool:
        assert list(pool.map(lambda i: speak(orpheus, i), range(5))) == [200] * 5


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("plain")
    (tmp / "plain.walk").write_text(NO_KV)
    server = Server(compile_plan(tmp, tmp / "plain.walk"), "--fake")
    yield server
    server.stop()


def test_a_plan_without_kv_components_keeps_max_batch(plain: Server) -> None:
    health = httpx.get(f"{plain.url}/health").json()
    assert health["capacity"] == {"running": 8, "queued": 16, "source": "max_batch",
                                  "detail": "the smallest max_batch: painter.max_batch = 8"}
    assert plain.ready["capacity"] == health["capacity"]
    r = httpx.post(f"{plain.url}/v1/generate", json={"params": {"seed": 3}, "stream": False}, timeout=30)
    assert r.status_code == 200, r.text
