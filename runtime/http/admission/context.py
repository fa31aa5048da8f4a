"""Whether a request's tokens can fit: its prompt against the model's positions and the KV pool, and
`max_tokens` against what the prompt leaves, checked at admission with the numbers in the message
(400 `context_length_exceeded`, OpenAI's code). A max_tokens the client did not give (the plan's
default) is lowered to what the prompt leaves instead.

Positions: the smallest `max_seq_len` over the plan's kv components (every one holds the prompt),
lowered by the `max_prompt_tokens` limit. The pool: the smallest KV pool a rank reports, in tokens
(`<component>.kv_pages` x `page_size`), once one does; a request whose prompt and completion exceed
it could never run. Only where the frontend can count the prompt's tokens: with the model's own
tokenizer (its module's hook) or with fake components; otherwise the ranks check it themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgc.runtime.api import HealthReport
from wgc.runtime.http.serving.errors import ApiError

from wgc.plan.model import Plan


@dataclass(frozen=True)
class Bound:
    tokens: int
    source: str  # for the message: "llm.max_seq_len", "the llm KV pool (96 pages x 16 tokens)", ...


def positions(plan: Plan) -> Bound | None:
    best: Bound | None = None
    for spec in plan.components:
        limit = spec.attrs.get("max_seq_len")
        if spec.engine == "kv" and isinstance(limit, int) and limit > 0 and (best is None or limit < best.tokens):
            best = Bound(limit, f"{spec.name}.max_seq_len")
    return best


def smallest_pool(plan: Plan, report: HealthReport) -> Bound | None:
    best: Bound | None = None
    for spec in plan.components:
        if spec.engine != "kv":
            continue
        size = spec.settings.get("page_size")
        page_size = size if isinstance(size, int) and size > 0 else 1
        for r in report.ranks:
            pages = r.counters.get(f"{spec.name}.kv_pages")
            if r.rank in spec.ranks and isinstance(pages, int) and (best is None or pages * page_size < best.tokens):
                best = Bound(pages * page_size, f"the {spec.name} KV pool of rank {r.rank} ({pages} pages x "
                             f"{page_size} tokens)")
    return best


class Context:
    def __init__(self, plan: Plan, max_prompt_tokens: int | None, counts: bool) -> None:
        self.counts = counts  # the frontend's tokenizer is the model's (or the components are fakes)
        self.positions = positions(plan)
        self.max_prompt = None if max_prompt_tokens is None else Bound(max_prompt_tokens, "the server's limit "
                                                                       "`max_prompt_tokens`")
        self.pool: Bound | None = None
        self._plan = plan

    def observe(self, report: HealthReport) -> None:
        found = smallest_pool(self._plan, report)
        if found is not None:
            self.pool = found

    def check(self, prompt: int, max_tokens: int | None, explicit: bool, param: str) -> int | None:
        """The max_tokens the request runs with: 400 when `prompt` tokens cannot fit, or cannot fit with
        the `max_tokens` the client asked for; a default max_tokens beyond what the prompt leaves is
        lowered to it (as a completion could never run past the positions anyway). `param` names the
        prompt's field."""
        if not self.counts:
            return max_tokens
        if self.max_prompt is not None and prompt > self.max_prompt.tokens:
            raise self._too_long(prompt, self.max_prompt, param)
        for bound in (self.positions, self.pool):
            if bound is None:
                continue
            if prompt >= bound.tokens:
                raise self._too_long(prompt, bound, param)
            if max_tokens is not None and prompt + max_tokens > bound.tokens:
                if not explicit:
                    max_tokens = bound.tokens - prompt
                    continue
                raise ApiError("context_length_exceeded", f"max_tokens = {max_tokens:,} does not fit: the prompt's "
                               f"{prompt:,} tokens leave {bound.tokens - prompt:,} of the {bound.tokens:,} of "
                               f"{bound.source}", "max_tokens")
        return max_tokens

    @staticmethod
    def _too_long(prompt: int, bound: Bound, param: str) -> ApiError:
        room = "more than" if prompt > bound.tokens else "all"
        return ApiError("context_length_exceeded", f"{param}: the prompt is {prompt:,} tokens, {room} the "
                        f"{bound.tokens:,} of {bound.source}, leaving none to generate", param)
