"""A cancel in the middle of a reply at tp 2 across two hosts (the llama family's `lm` over Gloo, the
follower its own process tree started with the real CLI, the head in this process): both ranks
acknowledge it, the requests decoding beside it (two of them written while others decode, so in
rounds that mix prompts and decodes) and one submitted after it give tp 1's greedy tokens, so the
group neither stalled nor lost a lane. Which rank hears of the cancel first is up to
the sockets here; the follower-first order is reproduced deterministically in
tests/runtime/test_tp_cancel.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from wgc.runtime.api import OutputEvent, Runtime

from tests.runtime.hosts import HEAD, Hosts, compiled, stderr
from tests.runtime.test_llama_tp_hosts import chat_docs

T = TypeVar("T")
LONG = 400  # the victim's max_tokens: far more steps than the test lets it run


def bounded(coro: Awaitable[T], seconds: float = 120.0) -> T:
    async def body() -> T:
        return await asyncio.wait_for(coro, seconds)

    return asyncio.run(body())


async def tokens_out(handle: Any, n: int) -> None:
    """Wait for the request's next n tokens."""
    seen = 0
    async for event in handle.events():
        seen += isinstance(event, OutputEvent)
        if seen == n:
            return


async def serve(plan: Path, cancel_one: bool) -> tuple[Any, list[list[Any]], list[Any]]:
    """(the cancel's result, the replies decoding beside it, a reply submitted after it). The replies
    arrive in waves: two prompts are written while the first ones decode, in the rounds where the
    batcher runs a prompt beside the decodes in one forward (runtime/worker/mixed.py)."""
    docs = chat_docs()
    async with await Runtime.start(plan, ready_timeout=60) as runtime:
        result = None
        victim = runtime.submit(params={"max_tokens": LONG, "temperature": 0.0}, inputs=docs[0]["inputs"])
        others = [runtime.submit(params=docs[0]["params"], inputs=docs[0]["inputs"])]
        await tokens_out(victim, 3)  # decoding now
        others += [runtime.submit(params=d["params"], inputs=d["inputs"]) for d in docs[1:]]
        await tokens_out(victim, 3)  # the new prompts went in beside its decodes
        if cancel_one:
            result = await victim.cancel(timeout=30)
        replies = [(await h.collect())["text"] for h in others]
        after = (await runtime.submit(params=docs[1]["params"], inputs=docs[1]["inputs"]).collect())["text"]
        if not cancel_one:
            await victim.cancel(timeout=30)
    return result, replies, after


def test_a_cancel_mid_reply_at_tp2_is_acknowledged_and_the_group_keeps_serving(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WGC_HOST_TIMEOUT", "10")  # the head's threshold: no failure is tested here, and a loaded
    # machine's start-up can pause a host's beats for more than the failure tests' 2 s
    monkeypatch.setenv("WGC_CPU_THREADS", "1")
    monkeypatch.delenv("WGC_LLAMA_DIR", raising=False)
    tp2 = compiled(tmp_path, "llama", "llama-tp2-hosts.toml")
    tp1 = compiled(tmp_path, "llama", "cpu.toml", extra='model = "llama"')
    with Hosts(tmp_path) as hosts:
        node = hosts.start(str(tp2), "--headless", "--node-rank", "1", "--master-addr", HEAD)
        result, replies, after = bounded(serve(tp2, cancel_one=True))
        assert node.wait(timeout=20) == 0, stderr(node)
    _, want, want_after = bounded(serve(tp1, cancel_one=False))
    assert result is not None and result.was_running and result.acked_by == (0, 1)
    assert replies == want and after == want_after
    assert all(len(r) > 1 for r in replies)
