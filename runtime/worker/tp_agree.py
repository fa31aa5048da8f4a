"""The ranks of a tensor-parallel copy agree on every batch: its first rank decides, the others follow.

Every rank of a TP copy runs the same RUNs (the lowering puts the call on the whole group), but
each batches whatever instances have reached a RUN in its own mailbox: inputs arrive in different
orders on different ranks, so two ranks could batch differently, and their collectives would then
mismatch (a hang, or silently wrong sums; Gloo aborts on a size mismatch). So, per round:

- the leader (the copy's first rank) sends a `TpBatch` for each batch of the component it is about
  to dispatch: the instances, in lane order, in dispatch order;
- a follower runs the component's batches only as decided, in the decisions' order, each with
  exactly the decided instances in the decided order; an instance the leader has not decided on
  yet waits at its RUN (deferred); a decision whose instances have not all arrived waits, and so
  do the ones behind it (the collectives of one group must run in one order);
- the leader's decisions of one round for a component (`joined` but the last) run in one round
  of the follower, all or none: the batcher may put a round's entries of a component in one
  forward (runtime/worker/mixed.py), and the follower must make the same forwards.

What the scheduler does inside a batch (token grants, deferrals) is the same on every rank: the
ranks' KV pools are shards of one geometry, equally sized, and the inputs are the same.
Speculation is off in loops with a TP RUN (`no_speculation`): a speculative iteration runs on the
rank that evaluates the stop, not on the others, and would leave one rank's collective unmatched.

Cancels take effect through the leader. The coordinator sends every rank its Cancel on its own
socket, so a follower may hear of one before a decision the leader made earlier names the request:
had it dropped the request then, the decision would wait for a lane that never comes and the
leader's collective would wait for the follower (until the Gloo timeout). So:

- a leader that learns a request is over (a Cancel, or its own failure of it) decides none of its
  lanes again and sends each follower a release (a `TpBatch` with `released`), behind every
  decision that may name it (one sender's messages arrive in order);
- a follower that gets a Cancel keeps the request running (`end` answers True) until the release
  of every leader it follows has come to the head of that leader's decisions, that is, until it has
  run every batch naming it; then `settle` hands the request and its Cancel back to be dropped.

A leader that also follows another copy posts its releases at once, before its own drop waits, so
two copies can never wait for each other. A request a rank fails is dropped at once (the batch's
fault isolation needs it gone): an error in a component is the same on every rank of the copy (the
same calls, the same shards' checks), so every rank fails it in the same batch, and a follower
leaves its lanes out of decisions the leader made before that batch, as the leader skips them. An
error on one rank alone remains unmatched (fail-stop: the Gloo timeout).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from wgc.runtime.protocol.messages import Message, TpBatch
from wgc.runtime.worker.instance import Instance

from wgc.plan import model as m
from wgc.plan.ports import tp_groups

Key = tuple[str, str]  # (component, entry)


class TpAgreement:
    def __init__(self, plan: m.Plan, rank: int, dead: set[int] | None = None) -> None:
        self.leads: dict[str, list[int]] = {}  # component → its followers, where this rank leads the copy
        self.follows: dict[str, int] = {}  # component → the leader, where this rank follows
        for name, ranks in tp_groups(plan):
            if rank in ranks:
                if ranks[0] == rank:
                    self.leads[name] = list(ranks[1:])
                else:
                    self.follows[name] = ranks[0]
        self.active = bool(self.leads or self.follows)
        self.decisions: dict[str, deque[TpBatch]] = {c: deque() for c in self.follows}
        self.held = 0
        self._no_spec: dict[tuple[int, int], bool] = {}
        self.dead = dead if dead is not None else set()  # the executor's ended requests
        self.ending: dict[int, str] = {}  # cancelled here, kept until released: request → the Cancel's reason
        self.released: dict[int, set[str]] = {}  # request → the followed components whose leader released it

    # ---- cancels ---------------------------------------------------------------------------

    def end(self, request: int, reason: str, post: Callable[[int, Message], None]) -> bool:
        """This rank got `request`'s Cancel. As a leader: release it to the followers. True when the
        drop must wait for this rank's leaders (`settle` hands it back); False: drop it now."""
        if request in self.ending:
            return True
        self._release(request, post)
        if not self.follows:
            return False
        for component, queue in self.decisions.items():  # between rounds: what has run is behind us
            self._releases_at_head(component, queue)
        if self.released.get(request, set()) >= self.follows.keys():
            del self.released[request]
            return False
        self.ending[request] = reason
        return True

    def failed(self, request: int, post: Callable[[int, Message], None]) -> str | None:
        """This rank fails `request` (dropped at once: fault isolation needs it gone). As a leader:
        release it, unless its Cancel did. The reason of a Cancel that was waiting, if one was (to
        acknowledge it now)."""
        reason = self.ending.pop(request, None)
        if reason is None:
            self._release(request, post)
        self.released.pop(request, None)
        return reason

    def _release(self, request: int, post: Callable[[int, Message], None]) -> None:
        for component, followers in self.leads.items():
            for follower in followers:
                post(follower, TpBatch(component, "", [], [request]))

    def settle(self) -> list[tuple[int, str]]:
        """(request, its Cancel's reason) for every request now released by all its leaders: drop them.
        Called between rounds only (after a round's batches ran, or on a message), never mid-round."""
        for component, queue in self.decisions.items():
            self._releases_at_head(component, queue)
        done = [(r, why) for r, why in self.ending.items() if self.released.get(r, set()) >= self.follows.keys()]
        for request, _ in done:
            del self.ending[request]
            self.released.pop(request, None)
        return done

    def _releases_at_head(self, component: str, queue: deque[TpBatch]) -> None:
        """Record the releases at the head of a leader's decisions: every decision before them has run."""
        while queue and queue[0].released:
            for request in queue.popleft().released:
                if request not in self.dead:
                    self.released.setdefault(request, set()).add(component)

    # ---- decisions -------------------------------------------------------------------------

    def decided(self, msg: TpBatch) -> None:
        self.decisions.setdefault(msg.component, deque()).append(msg)

    def no_speculation(self, code: list[Any], head: int, tail: int) -> bool:
        """Whether the loop at code[head:tail] runs a RUN of a TP component of this rank."""
        if not self.active:
            return False
        key = (id(code), head)
        if key not in self._no_spec:
            self._no_spec[key] = any(isinstance(i, m.Run) and (i.component in self.leads or i.component in self.follows)
                                     for i in code[head:tail])
        return self._no_spec[key]

    def agree(self, batches: dict[Key, list[Instance]], order: list[Key],
              post: Callable[[int, Message], None]) -> tuple[list[Instance], list[Key]]:
        """Announce this rank's decisions, or follow the leader's: (instances to hold back, dispatch order).
        `batches` is changed in place (a follower's batches become the decided ones)."""
        if not self.active:
            return [], order
        out: list[Key] = []
        held: list[Instance] = []
        mine: list[Key] = []  # this round's decisions, in dispatch order
        for key in order:
            group = batches[key]
            if key[0] in self.leads and self.ending and group:  # released requests' lanes are never decided
                held += [i for i in group if i.request in self.ending]
                group = batches[key] = [i for i in group if i.request not in self.ending]
            if key[0] in self.leads and group:
                mine.append(key)
            if key[0] not in self.follows:
                out.append(key)
        for n, key in enumerate(mine):
            joined = any(k[0] == key[0] for k in mine[n + 1:])
            msg = TpBatch(key[0], key[1], [[i.request, i.key] for i in batches[key]], joined=joined)
            for follower in self.leads[key[0]]:
                post(follower, msg)
        for component in self.follows:
            held += self._follow(component, batches, out)
        self.held += len(held)
        return held, out

    def _follow(self, component: str, batches: dict[Key, list[Instance]], out: list[Key]) -> list[Instance]:
        mine = {key: group for key, group in batches.items() if key[0] == component}
        here = {key: {(i.request, i.key): i for i in group} for key, group in mine.items()}
        used: set[int] = set()
        queue = self.decisions[component]
        while queue:
            self._releases_at_head(component, queue)  # recorded only: the drops wait for `settle`
            n = 1  # the leader's decisions of one round go together (one forward, perhaps: mixed.py)
            while n <= len(queue) and queue[n - 1].joined:
                n += 1
            if n > len(queue):
                break  # the rest of the leader's round is still on its way
            picked: dict[Key, list[Instance]] = {}
            for decision in list(queue)[:n]:
                key = (component, decision.entry)
                at = here.get(key, {})  # only instances at this entry's RUN: the same instance may be at another
                # a lane of a request this rank already failed is left out: the leader failed it in the same
                # batch (a component's error is the same on every rank) and skips its later lanes too
                group = [at.get((int(r), str(k))) for r, k in decision.instances if int(r) not in self.dead]
                if key in out or key in picked or any(i is None for i in group):
                    break  # one batch per entry a round; or the decided instances are not all here yet
                picked[key] = [i for i in group if i is not None]
            if len(picked) < n:
                break
            for key, group in picked.items():
                queue.popleft()
                batches[key] = group
                used.update(id(i) for i in group)
                out.append(key)
        held = [i for group in mine.values() for i in group if id(i) not in used]
        for key in mine:
            if key not in out:
                batches[key] = []
        return held
