"""Waiting for ranks to be ready bounds a silence, not the whole start-up: a rank that keeps saying
what it loads and captures may take as long as it needs; one that says nothing for `timeout` seconds
fails the start with the rank and the last line heard. The supervisor's wait alone, with a scripted
readiness and scripted start-up lines (the process-level start-up is in test_startup.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from wgc.runtime.process.errors import StartError
from wgc.runtime.process.supervisor import RankProcess, Supervisor


def supervisor(ranks: int) -> Supervisor:
    sup = Supervisor("plan.bin", None, ".", True, lambda rank, why: None)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    sup._all_ready = loop.create_future()
    # No processes: the wait reads only readiness and start-up lines.
    sup.ranks = [RankProcess(r, None, Path("err"), loop.create_future()) for r in range(ranks)]  # type: ignore[arg-type]
    return sup


def test_steady_progress_keeps_a_long_start_up_alive() -> None:
    """Twenty lines 0.05 s apart: a start-up of 1 s, two and a half times the 0.4 s allowed silence
    (each gap an eighth of it, so a busy machine's late wake-ups don't matter)."""

    async def scenario() -> float:
        sup = supervisor(2)
        loop = asyncio.get_running_loop()

        async def rank_work() -> None:
            for k in range(20):
                await asyncio.sleep(0.05)
                sup.saw_progress(1, f"rank 1: captured bucket {k}")
            sup.mark_ready(0)
            sup.mark_ready(1)

        start = loop.time()
        work = asyncio.ensure_future(rank_work())
        await sup.wait_ready(timeout=0.4)
        await work
        return loop.time() - start

    assert asyncio.run(scenario()) >= 1.0


def test_a_silent_rank_fails_the_start_naming_it_and_the_last_line() -> None:
    async def scenario() -> None:
        sup = supervisor(2)
        sup.mark_ready(0)

        async def rank_work() -> None:
            await asyncio.sleep(0.05)
            sup.saw_progress(1, "rank 1: loading llm (wgc.models.orpheus.LanguageModel) ...")  # then nothing

        work = asyncio.ensure_future(rank_work())
        try:
            await sup.wait_ready(timeout=0.3)
        finally:
            await work

    with pytest.raises(StartError) as err:
        asyncio.run(scenario())
    assert str(err.value) == ("rank 1 did not report ready: no start-up progress for 0.3 s; the last start-up line "
                              "was rank 1's: rank 1: loading llm (wgc.models.orpheus.LanguageModel) ...")


def test_no_line_at_all_says_so() -> None:
    async def scenario() -> None:
        await supervisor(1).wait_ready(timeout=0.05)

    with pytest.raises(StartError, match=r"^rank 0 did not report ready: no start-up progress for 0.05 s; none said"):
        asyncio.run(scenario())
