"""Memory-aware scheduling of one batch of calls on one kv component: which calls run this round,
with how many tokens each, which wait, which requests are preempted, which calls fail alone.

A pure object over plain data (no torch, no sockets), as nano-vllm's Scheduler: the executor hands
it one `Demand` per call, as the component computed it from its pool, and applies the `Decision`.

The rules, in order (vLLM's and nano-vllm's, written for wgc's batches of entry calls):
- A call that can never run (its prompt alone exceeds the model's positions or the whole pool)
  fails alone, with the component's message naming its own limit.
- The calls of one walk instance (the lanes of a fused parallel block) run or wait together: an
  instance moves past its RUN only when every lane has its result.
- Order: calls that have waited `STARVED` rounds or more first; then calls that write all at once
  (decodes) before chunkable ones (prompts); then the older request first (ids grow with arrival).
- Token budget: the round's tokens are shared out in that order. A chunkable call (one lane, a
  causal prompt) takes what is left, at least one page's worth or the rest of its prompt; a call
  that is not chunkable takes its tokens whole, and waits when they exceed what is left, unless
  nothing has run yet this round (so that a call larger than the budget still runs).
- Pages: a call runs only when its pages fit in what is free. When a request that already holds
  pages (a running one) cannot grow, the newest request holding pages is preempted — its pages
  are taken back (the component keeps its state elsewhere and restores it later) — and this is
  repeated until the call fits; if the newest is the call's own request, that request is the one
  preempted and waits. A request that holds nothing waits for pages: it never preempts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

STARVED = 2  # rounds a deferred call waits before it goes ahead of fresher work


@dataclass(slots=True)
class Demand:
    """What one call asks of its component's pool this round (the component fills it in). Not frozen:
    one is made per call per round, and a frozen dataclass's __init__ (one object.__setattr__ a field)
    cost 4x a plain one's; nothing changes a Demand once made."""

    request: int
    tokens: int  # tokens it still has to write: the rest of a prompt, 1 for a decode, 0 for a read-only query
    chunkable: bool  # may be written over several rounds (a causal prompt); otherwise all at once
    page_size: int
    slack: int = 0  # free token slots in its label's last page: tokens that need no new page
    setup_pages: int = 0  # pages needed before any token: a preempted label brought back, a copy-on-write
    error: str = ""  # why it can never run: it fails alone with this message

    def pages(self, tokens: int) -> int:
        """Pages taken by writing `tokens` of it now."""
        beyond = max(0, tokens - self.slack)
        return self.setup_pages + -(-beyond // self.page_size) if tokens or self.setup_pages else 0


@dataclass(frozen=True, slots=True)
class Group:
    """The calls of one walk instance, by their index in the batch."""

    calls: tuple[int, ...]
    waited: int = 0  # rounds this instance's RUN has been deferred


@dataclass
class Decision:
    grants: dict[int, int] = field(default_factory=dict)  # call index → tokens to write this round
    deferred: list[int] = field(default_factory=list)  # groups (by index in the input) that wait
    failed: dict[int, str] = field(default_factory=dict)  # call index → why it fails alone
    preempted: list[int] = field(default_factory=list)  # requests whose pages are taken back, in order
    budget_used: int = 0


def schedule(demands: list[Demand], groups: list[Group], free_pages: int, budget: int,
             holders: dict[int, int]) -> Decision:
    """Decide one batch. `holders`: request → pages it holds in this pool now (the preemptible ones);
    `budget`: tokens this component may still write this round."""
    fits = fits_whole(demands, free_pages, budget)
    return fits if fits is not None else by_groups(demands, groups, free_pages, budget, holders)


def by_groups(demands: list[Demand], groups: list[Group], free_pages: int, budget: int,
              holders: dict[int, int]) -> Decision:
    """The rules applied group by group, in priority order (`schedule` when not all fits)."""
    out = Decision()
    failed_groups = {g for g, group in enumerate(groups) if any(demands[i].error for i in group.calls)}
    for g in failed_groups:
        for i in groups[g].calls:
            out.failed[i] = demands[i].error or "a call of the same instance cannot run"
    order = sorted((g for g in range(len(groups)) if g not in failed_groups),
                   key=lambda g: _priority(demands, groups[g]))
    state = _Round(free_pages, budget, dict(holders))
    for g in order:
        if not _place(demands, groups, g, state, out):
            out.deferred.append(g)
    out.deferred.sort()
    out.budget_used = budget - state.budget
    return out


def fits_whole(demands: list[Demand], free_pages: int, budget: int) -> Decision | None:
    """The common round decided in one pass: no call fails, and every call's whole tokens fit the
    budget and their pages fit what is free. Then the rules above grant every call its tokens in
    any order (each takes what it asks, and what is left always covers the rest), defer nothing
    and preempt no one; None when that is not the case (the rules then run group by group)."""
    tokens = whole_tokens(demands, free_pages, budget)
    if tokens is None:
        return None
    return Decision(grants={i: d.tokens for i, d in enumerate(demands)}, budget_used=tokens)


def whole_tokens(demands: list[Demand], free_pages: int, budget: int) -> int | None:
    """`fits_whole`'s test alone: the round's tokens when every call runs whole (each call's grant is
    then its own `tokens`), else None. What the batcher asks every round, so `Demand.pages` is
    written inline."""
    tokens = pages = 0
    for d in demands:
        if d.error:
            return None
        n = d.tokens
        tokens += n
        if n > d.slack:
            pages += d.setup_pages + -(-(n - d.slack) // d.page_size)
        else:
            pages += d.setup_pages
    if pages > free_pages or tokens > budget:
        return None
    return tokens


def _priority(demands: list[Demand], group: Group) -> tuple[int, int, int]:
    first = demands[group.calls[0]]
    chunky = any(demands[i].chunkable for i in group.calls)
    return (0 if group.waited >= STARVED else 1, 1 if chunky else 0, first.request)


@dataclass
class _Round:
    free: int
    budget: int
    holders: dict[int, int]
    ran: bool = False
    granted: dict[int, list[int]] = field(default_factory=dict)  # group → its call indices, in grant order


def _place(demands: list[Demand], groups: list[Group], g: int, st: _Round, out: Decision) -> bool:
    calls = groups[g].calls
    request = demands[calls[0]].request
    if request in out.preempted:
        return False
    while True:
        tokens = _tokens(demands, calls, st)
        if tokens is None:
            return False  # over the round's budget: next round
        pages = sum(demands[i].pages(n) for i, n in zip(calls, tokens))
        if pages <= st.free:
            break
        if len(calls) == 1 and demands[calls[0]].chunkable:
            fitted = _fit_chunk(demands[calls[0]], st.free, tokens[0])
            if fitted:
                tokens, pages = [fitted], demands[calls[0]].pages(fitted)
                break
        if request not in st.holders:
            return False  # holds nothing: waits for pages, preempts no one
        victim = max(st.holders)
        _preempt(victim, demands, groups, st, out)
        if victim == request:
            return False
    st.free -= pages
    st.budget -= sum(tokens)
    st.ran = True
    st.holders[request] = st.holders.get(request, 0) + pages
    st.granted[g] = list(calls)
    for i, n in zip(calls, tokens):
        out.grants[i] = n
    return True


def _tokens(demands: list[Demand], calls: tuple[int, ...], st: _Round) -> list[int] | None:
    """Each call's tokens this round under the budget, or None when the group must wait for it."""
    wanted = [demands[i].tokens for i in calls]
    if len(calls) == 1 and demands[calls[0]].chunkable and wanted[0] > st.budget:
        floor = min(wanted[0], demands[calls[0]].page_size)
        grant = max(st.budget, floor if not st.ran else 0)
        return [grant] if grant > 0 else None
    if sum(wanted) > st.budget and st.ran:
        return None
    return wanted


def _fit_chunk(demand: Demand, free: int, wanted: int) -> int:
    """The most tokens of a chunkable call whose pages fit in `free` (0: not even one)."""
    room = (free - demand.setup_pages) * demand.page_size + demand.slack
    return max(0, min(wanted, room)) if free >= demand.setup_pages else 0


def _preempt(victim: int, demands: list[Demand], groups: list[Group], st: _Round, out: Decision) -> None:
    """Take the victim's pages back, with whatever was granted to it earlier this round."""
    st.free += st.holders.pop(victim)
    out.preempted.append(victim)
    for g, calls in list(st.granted.items()):
        if demands[calls[0]].request == victim:
            del st.granted[g]
            for i in calls:
                st.budget += out.grants.pop(i)
            out.deferred.append(g)
