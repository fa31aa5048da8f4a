"""One batched call: every instance waiting at a RUN of the same (component, entry) in this round.

1. Build each instance's calls, one per lane of its RUN (a fused parallel block has several).
2. A kv component says what each call needs of its pool (`Component.demands`); the scheduler
   (scheduler.py) decides: the requests to preempt, the calls that fail alone (a limit they can
   never meet), the instances that wait for the next round, and each running call's token grant.
3. The calls run in slices of the component's `max_batch`. Fault isolation: a `CallError` fails
   its own request and the slice runs again without it; any other exception is retried instance
   by instance, once, so that one bad request never fails its batch-mates (a kv component undoes
   a failed step itself, kv_engine.py `abort`). Calls of a request that failed are never run.
4. Results go to the frames; an instance moves past its RUN, or stays at it for the next round:
   deferred by the scheduler, or given `PARTIAL` (a chunk of a long prompt was written).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wgc.runtime.components.base import PARTIAL, Call, CallError, Component
from wgc.runtime.worker.instance import Instance
from wgc.runtime.worker.scheduler import Demand, Group, by_groups, whole_tokens

from wgc.plan.model import Run

if TYPE_CHECKING:
    from wgc.runtime.worker.executor import Executor


@dataclass(slots=True)
class CallBatch:
    calls: list[Call] = field(default_factory=list)
    owners: list[int] = field(default_factory=list)  # per call: its instance's index in the group
    outs: list[str] = field(default_factory=list)  # per call: the frame value its result goes to

    def lanes(self) -> dict[int, list[int]]:
        """Instance index → its calls' indices (an instance's calls are adjacent)."""
        out: dict[int, list[int]] = {}
        for c, owner in enumerate(self.owners):
            out.setdefault(owner, []).append(c)
        return out


def round_budget(settings: dict[str, Any], demands: list[Demand]) -> int:
    """The tokens a kv component may write this round, set by its first batch of the round: decodes
    go first (`Batcher.order`), so a first batch of prompt chunks only means that no sequence of the
    component decodes this round, and it takes `prefill_token_budget`: a burst of prompts with
    nothing running is prefilled in one larger forward, and no running sequence waits for it (the
    batch-32 engine cell took two rounds of 16 prompts at 512 tokens). Any other round takes
    `token_budget`, the bound on what a decode step waits for."""
    budget = int(settings.get("token_budget") or 0) or 1 << 30
    if demands and all(d.chunkable for d in demands):
        return max(budget, int(settings.get("prefill_token_budget") or 0))
    return budget


class Batcher:
    """Forms and runs the batches of one rank; `budgets` are the kv components' tokens left this round."""

    def __init__(self, ex: Executor) -> None:
        self.ex = ex
        self.budgets: dict[str, int] = {}
        self.stats = {"preemptions": 0, "deferred_calls": 0, "partial_calls": 0, "isolated_retries": 0,
                      "calls_failed_alone": 0, "mixed_calls": 0}
        self._chunked = {name: getattr(c, "chunked_entries", frozenset()) for name, c in ex.components.items()}
        # Components that take no pool memory (Component.demands not overridden): the plain path
        self._plain = {name for name, c in ex.components.items() if type(c).demands is Component.demands}
        # Components whose entries' calls of one round may share one forward (mixed.py)
        self._mixed: dict[str, frozenset[str]] = {
            name: entries for name, c in ex.components.items()
            if (entries := frozenset(getattr(c, "mixed_entries", ()))) and name not in self._plain}
        self.mixes = bool(self._mixed)

    def new_round(self) -> None:
        if self.budgets:
            self.budgets.clear()

    def order(self, batches: dict[tuple[str, str], list[Instance]]) -> list[tuple[str, str]]:
        """Entries that write all at once (decodes) before the chunkable ones (prompts), so that the
        round's token budget goes to the running sequences first."""
        if len(batches) == 1:
            return list(batches)
        chunked = self._chunked
        return sorted(batches, key=lambda key: key[1] in chunked[key[0]])

    def together(self, order: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
        """The round's dispatches, in `order`: each (component, entry) alone, except the entries of a
        component that runs them in one forward (`mixed_entries`), which go together at the place of
        the first (mixed.py)."""
        mixed = self._mixed
        if not mixed:
            return [[key] for key in order]
        out: list[list[tuple[str, str]]] = []
        at: dict[str, int] = {}
        for key in order:
            if key[1] in mixed.get(key[0], ()):
                if key[0] in at:
                    out[at[key[0]]].append(key)
                    continue
                at[key[0]] = len(out)
            out.append([key])
        return out

    def dispatch(self, component: str, entry: str, group: list[Instance]) -> bool:
        """Run one batch; whether any call ran (progress was made)."""
        comp = self.ex.components[component]
        if component in self._plain:
            done = self._plain_dispatch(comp, entry, group)
            if done is not None:
                return done
        failures = self.ex.failures
        batch = self._build(comp, group)
        stays: set[int] = set()  # instances that stay at their RUN this round
        demands = comp.demands(entry, batch.calls) if batch.calls else None
        if demands is not None:
            batch, stays = self._schedule(comp, component, entry, group, batch, demands)
        ran = self._run(comp, component, entry, group, batch, stays, failures)
        self._move_on(group, stays)
        return ran

    def _move_on(self, group: list[Instance], stays: set[int]) -> None:
        """Past their RUN, or deferred to a later round (`stays`)."""
        ready = self.ex.ready
        for i, inst in enumerate(group):
            inst.dispatched = False
            if not inst.alive:
                continue
            if stays and i in stays:
                self.ex.defer(inst)
            else:
                inst.pc += 1
                inst.waited = 0
                ready.append(inst)

    def _plain_dispatch(self, comp: Component, entry: str, group: list[Instance]) -> bool | None:
        """The common case written straight (the runtime's per-RUN cost): no pool memory, one lane per
        instance, one slice. None, having changed nothing, when it is not that case."""
        limit = int(comp.spec.settings.get("max_batch", 0) or 0)
        if limit and len(group) > limit:
            return None
        interp = self.ex.interp
        calls: list[Call] = []
        outs: list[str] = []
        last: Run | None = None
        args: Any = None
        label = out = ""
        try:
            for inst in group:
                ins = inst.code[inst.pc]
                if ins is not last:
                    if len(ins.labels) != 1:
                        return None
                    last, args, label, out = ins, interp.arg_tuples(ins)[0], ins.labels[0], ins.outputs[0]
                if inst.pending:
                    interp.before_call(inst, comp, label)
                calls.append(Call(inst.request, label, args(inst)))
                outs.append(out)
        except KeyError:
            return None  # a value is missing: the general path fails that instance alone
        totals = self.ex.entry_stats.setdefault((comp.spec.name, entry), [0, 0, 0])
        began = time.perf_counter()
        try:
            pairs: Any = enumerate(comp.call(entry, calls))
        except Exception as err:  # noqa: BLE001 - isolated: it fails its own requests only
            batch = CallBatch(calls, list(range(len(calls))), outs)
            pairs = self._call_isolated(comp, comp.spec.name, entry, batch, list(range(len(calls))), totals,
                                        self.ex.failures, err)
        else:
            self._count(totals, len(calls), began)
        for i, value in pairs:
            if outs[i]:
                group[i].frame[outs[i]] = value
        ready = self.ex.ready
        for inst in group:
            inst.dispatched = False
            if inst.alive:
                inst.pc += 1
                inst.waited = 0
                ready.append(inst)
        return True

    # ---- 1. calls --------------------------------------------------------------------------

    def _build(self, comp: Component, group: list[Instance]) -> CallBatch:
        interp = self.ex.interp
        out = CallBatch()
        calls, owners, outs = out.calls, out.owners, out.outs
        last: Run | None = None
        lanes: list[tuple] = []
        for i, inst in enumerate(group):
            if not inst.alive:  # its request failed while this batch was being built
                continue
            ins = inst.code[inst.pc]
            if ins is not last:  # a batch is usually one instruction of one walk: look its lanes up once
                last = ins
                lanes = list(zip(interp.arg_tuples(ins), ins.labels, ins.outputs))
            mark = len(calls)
            try:
                for args, label, value in lanes:
                    if inst.pending:
                        interp.before_call(inst, comp, label)
                    calls.append(Call(inst.request, label, args(inst)))
                    owners.append(i)
                    outs.append(value)
            except KeyError as err:
                del calls[mark:], owners[mark:], outs[mark:]  # an instance's lanes go together or not at all
                self.ex.fail(inst.request, str(interp.missing_value(inst, err.args[0])))
        return out

    # ---- 2. memory ------------------------------------------------------------------------------

    def _schedule(self, comp: Component, component: str, entry: str | list[str], group: list[Instance],
                  batch: CallBatch, demands: list[Demand]) -> tuple[CallBatch, set[int]]:
        """`entry`: the batch's entry, or each call's (a mixed batch)."""
        budget = self.budgets.get(component)
        if budget is None:
            budget = self.budgets[component] = round_budget(comp.spec.settings, demands)
        free = comp.pool_free()
        used = whole_tokens(demands, free, budget)
        if used is not None:  # the common round, in one pass: every call runs with all its tokens
            self.budgets[component] = budget - used
            # built, not `_replace`d (4x the cost, for every decode call every round)
            batch.calls = [c if c.budget == d.tokens else Call(c.request, c.label, c.args, d.tokens)
                           for c, d in zip(batch.calls, demands)]
            return batch, set()
        lanes = batch.lanes()
        owners = sorted(lanes)
        groups = [Group(tuple(lanes[i]), group[i].waited) for i in owners]
        # Who holds what matters only to preempt, when the round's calls may not all fit; counting it
        # walks every page table of the pool (O(context) a step: 0.36 ms at batch 32 of 2,000-token rows).
        short = sum(d.pages(d.tokens) for d in demands) > free
        decision = by_groups(demands, groups, free, budget, comp.pool_holders() if short else {})
        self.budgets[component] = budget - decision.budget_used
        for request in decision.preempted:
            comp.preempt(request)
            self.stats["preemptions"] += 1
        for i, why in decision.failed.items():
            request = batch.calls[i].request
            if request not in self.ex.dead:
                self.stats["calls_failed_alone"] += 1
                self.ex.fail(request, f"{component}.{entry if isinstance(entry, str) else entry[i]}: {why}")
        stays = {owners[g] for g in decision.deferred}
        for i in stays:
            group[i].waited += 1
        self.stats["deferred_calls"] += sum(len(lanes[i]) for i in stays)
        kept = CallBatch()
        for i in owners:
            if i in stays or any(c in decision.failed for c in lanes[i]):
                continue
            for c in lanes[i]:
                call = batch.calls[c]
                kept.calls.append(call._replace(budget=decision.grants.get(c, 0)))
                kept.owners.append(i)
                kept.outs.append(batch.outs[c])
        return kept, stays

    # ---- 3. running, with fault isolation --------------------------------------------------------

    def _run(self, comp: Component, component: str, entry: str, group: list[Instance], batch: CallBatch,
             stays: set[int], failures: int) -> bool:
        calls = batch.calls
        if not calls:
            return False
        limit = int(comp.spec.settings.get("max_batch", 0) or 0) or len(calls)
        totals = self.ex.entry_stats.setdefault((component, entry), [0, 0, 0])
        owners, outs = batch.owners, batch.outs
        for start in range(0, len(calls), limit):
            stop = min(start + limit, len(calls))
            if self.ex.failures == failures:  # the common case: one call of the whole slice
                began = time.perf_counter()
                try:
                    results = comp.call(entry, calls[start:stop] if start or stop < len(calls) else calls)
                except Exception as err:  # noqa: BLE001 - isolated below: it fails its own requests only
                    pairs = self._call_isolated(comp, component, entry, batch, list(range(start, stop)), totals,
                                                failures, err)
                else:
                    self._count(totals, len(results), began)
                    pairs = zip(range(start, stop), results)
            else:
                pairs = self._call_isolated(comp, component, entry, batch, list(range(start, stop)), totals, failures)
            self._store(group, owners, outs, pairs, stays)
        return True

    def _store(self, group: list[Instance], owners: list[int], outs: list[str], pairs: Any, stays: set[int]) -> None:
        """(call index, result) pairs into the frames; a PARTIAL call's instance stays at its RUN."""
        for c, value in pairs:
            if value is PARTIAL:
                stays.add(owners[c])
                group[owners[c]].waited = 0  # it made progress
                self.stats["partial_calls"] += 1
            elif outs[c]:
                group[owners[c]].frame[outs[c]] = value

    def _count(self, totals: list[int], n: int, began: float) -> None:
        stats = self.ex.stats
        stats["batched_calls"] += 1
        stats["runs"] += n
        totals[0] += 1
        totals[1] += n
        totals[2] += int((time.perf_counter() - began) * 1e6)

    def _call_isolated(self, comp: Component, component: str, entry: str, batch: CallBatch, chunk: list[int],
                       totals: list[int], failures: int, first: Exception | None = None) -> list[tuple[int, Any]]:
        """(call index, result) pairs; a failing request is failed and left out, its batch-mates run.
        `first`: what the whole chunk raised already, if it was tried."""
        out: list[tuple[int, Any]] = []
        pending = [chunk]
        retried = False
        ex = self.ex
        while pending:
            part = pending.pop(0)
            if ex.failures != failures:  # a request of this batch failed: its calls are not run
                part = [c for c in part if batch.calls[c].request not in ex.dead]
            if not part:
                continue
            began = time.perf_counter()
            try:
                if first is not None:
                    error, first = first, None
                    raise error
                results = comp.call(entry, [batch.calls[c] for c in part])
            except CallError as err:
                ex.fail(err.request, f"{component}.{entry}: {err}")
                self.stats["calls_failed_alone"] += 1
                pending.insert(0, part)
                continue
            except Exception as err:  # noqa: BLE001 - a component failure fails its requests, not the rank
                message = f"rank {ex.rank}: {component}.{entry} raised {type(err).__name__}: {err}"
                requests = {batch.calls[c].request for c in part}
                if len(requests) == 1 or retried:
                    for request in requests:
                        ex.fail(request, message)
                    continue
                # not attributable: each instance alone, once (its lanes stay together)
                retried = True
                self.stats["isolated_retries"] += 1
                by_owner: dict[int, list[int]] = {}
                for c in part:
                    by_owner.setdefault(batch.owners[c], []).append(c)
                pending[:0] = list(by_owner.values())
                continue
            self._count(totals, len(results), began)
            out.extend(zip(part, results))
        return out
