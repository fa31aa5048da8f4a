"""What a plan can serve, read from its walks, flows and params: which routes, where a prompt goes.

Routes. A plan whose walks emit `text` serves chat and completions; `audio` with a text input serves speech;
`image` with a text input serves image generation, and edits when it also takes an image;
`rollout` and `plan` walks over a video input, emitting tensors, serve the world-model routes;
`action` with start-walk inputs `images`, `prompt` and `state` serves the policy route;
`/v1/generate` serves every plan. A route a plan cannot serve answers 404 with the reason.

Prompts. A plan whose flows iterate over `request.parts` takes the prompt as parts (text and
media in order, each through its each-arm); otherwise the walks that `start` leads to take it as
named inputs, matched by type (the first `text` or `tokens` input gets the text, the first
`image` input the image, ...).

Emitters. The component whose entry produced an emitted value (`emit text tok` after
`tok = llm.decode(...)`): its module provides the tokenizer, its consts the end tokens and the
audio sample rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgc.plan.model import ComponentSpec, Emit, EVal, Loop, ParamSpec, Plan, Run
from wgc.semantics.flows import ANY_KIND

MEDIA_KINDS = ("image", "audio", "video")
TEXT_TYPES = ("text", "tokens")


@dataclass(frozen=True)
class PromptSlot:
    via_parts: bool  # True: request.parts; False: named inputs of the start walks
    part_kinds: frozenset[str]  # kinds some each-arm takes ("_" takes any)
    inputs: tuple[tuple[str, str], ...]  # (name, type) of every start-walk input, in order

    def takes(self, kind: str) -> bool:
        if self.via_parts:
            return kind in self.part_kinds or ANY_KIND in self.part_kinds
        types = TEXT_TYPES if kind == "text" else (kind,)
        return any(_base(t) in types for _, t in self.inputs)


@dataclass(frozen=True)
class Capabilities:
    model: str
    params: dict[str, ParamSpec]
    emits: frozenset[str]
    emitters: dict[str, tuple[ComponentSpec, ...]]
    slot: PromptSlot
    walks: frozenset[str] = frozenset()

    @staticmethod
    def of(plan: Plan) -> Capabilities:
        emitters = _emitters(plan)
        return Capabilities(plan.model, {p.name: p for p in plan.params}, frozenset(emitters), emitters,
                            _slot(plan), frozenset(w.name for w in plan.walks))

    def param(self, *names: str) -> ParamSpec | None:
        """The first of `names` the plan declares."""
        return next((self.params[n] for n in names if n in self.params), None)

    def unsupported(self, route: str) -> str | None:
        """Why the plan cannot serve `route` (chat, speech, images, edits, generate); None when it can."""
        text_in = self.slot.takes("text")
        need = {
            "chat": [("text" in self.emits, "emits no text"), (text_in, "takes no text input")],
            "completions": [("text" in self.emits, "emits no text"), (text_in, "takes no text input")],
            "speech": [("audio" in self.emits, "emits no audio"), (text_in, "takes no text input")],
            "images": [("image" in self.emits, "emits no image"), (text_in, "takes no text prompt")],
            "edits": [("image" in self.emits, "emits no image"), (text_in, "takes no text prompt"),
                      (self.slot.takes("image"), "takes no input image")],
            "world_model": [({"rollout", "plan"} <= self.walks, "has no rollout and plan walks"),
                            ("tensor" in self.emits, "emits no tensor"), (self.slot.takes("video"), "takes no video")],
            "policy": [("action" in self.emits, "emits no action"),
                       ({"images", "prompt", "state"} <= {n for n, _ in self.slot.inputs},
                        "takes no images, prompt and state inputs")],
        }.get(route, [])
        for ok, why in need:
            if not ok:
                return f"model `{self.model}` {why}, so its plan cannot serve this route"
        return None

    def routes(self) -> dict[str, bool]:
        return {r: self.unsupported(r) is None
                for r in ("chat", "completions", "speech", "images", "edits", "world_model", "policy", "generate")}


def _base(type_name: str) -> str:
    return type_name.split("[", 1)[0].strip()


def _emitters(plan: Plan) -> dict[str, tuple[ComponentSpec, ...]]:
    """Per emitted modality, the components that produced the emitted values (possibly none: an EVAL)."""
    by_name = {c.name: c for c in plan.components}
    found: dict[str, dict[str, ComponentSpec]] = {}
    for rank in plan.ranks:
        for sched in rank.schedules:
            produced: dict[str, str] = {}
            for ins in sched.instructions:  # every producer first: a loop emits before it reassigns
                if isinstance(ins, Run):
                    produced.update({out: ins.component for out in ins.outputs if out})
                elif isinstance(ins, Loop):
                    produced.update({c.name: produced[c.init.name] for c in ins.carries
                                     if isinstance(c.init, EVal) and c.init.name in produced})
            for ins in sched.instructions:
                if isinstance(ins, Emit):
                    comps = found.setdefault(ins.modality, {})
                    comp = produced.get(ins.value)
                    if comp is not None and comp in by_name:
                        comps.setdefault(comp, by_name[comp])
    return {m: tuple(c.values()) for m, c in found.items()}


def _slot(plan: Plan) -> PromptSlot:
    walks = {w.name: w for w in plan.walks}
    kinds: set[str] = set()
    inputs: list[tuple[str, str]] = []
    via_parts = False
    for flow in plan.flows:
        eaches = {e.name: e for e in flow.eaches}
        for t in flow.transitions.get("start", []):
            if t.target in eaches:
                via_parts = True
                kinds |= {arm.kind for arm in eaches[t.target].arms if arm.walks}
            elif t.target in walks:
                w = walks[t.target]
                inputs += [(n, ty) for n, ty in zip(w.inputs, w.args) if (n, ty) not in inputs]
        via_parts = via_parts or bool(flow.eaches)
        kinds |= {arm.kind for e in flow.eaches for arm in e.arms if arm.walks}
    return PromptSlot(via_parts, frozenset(kinds), tuple(inputs))
