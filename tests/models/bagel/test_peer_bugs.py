"""Two of the peers' BAGEL bugs (models-wave2.md §1.10) end to end on the tiny components; the others
have their tests beside the component they concern (test_vit.py: patch order, post-LayerNorm, aspect
ratio; test_llm_blocks.py: an image block at one rope position; test_llm_labels.py: one wrap)."""

from __future__ import annotations

from typing import Any

from wgc.models.bagel import LanguageModel
from wgc.runtime.components.base import Call, Component, load_class
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process.local import LocalCluster
from wgc.runtime.protocol.messages import Part

from tests.models.bagel.test_end_to_end import cluster, edit, image, one, plan, understand
from wgc.plan.model import ComponentSpec


class OrderLM(LanguageModel):
    """The tiny LLM, recording (request, entry, label) of every prefill call in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefills: list[tuple[int, str, str]] = []

    def _record(self, entry: str, calls: list[Call]) -> None:
        self.prefills += [(c.request, entry, self.label_of(c)) for c in calls]

    def prefill_text(self, calls: list[Call]) -> list[Any]:
        self._record("text", calls)
        return super().prefill_text(calls)

    def prefill_vit(self, calls: list[Call]) -> list[Any]:
        self._record("vit", calls)
        return super().prefill_vit(calls)

    def prefill_vae(self, calls: list[Call]) -> list[Any]:
        self._record("vae", calls)
        return super().prefill_vae(calls)


def test_text_and_images_go_into_main_in_prompt_order() -> None:
    """vllm-omni PR #6702: text and images were not packed in prompt order."""
    made: list[Component] = []

    def factory(spec: ComponentSpec, rank: int) -> Component:
        cls = OrderLM if spec.name == "llm" else load_class(spec.cls)
        made.append(cls(spec, rank, "cpu", preset="tiny") if cls is OrderLM else cls.tiny(spec, rank, "cpu"))
        return made[-1]

    c = LocalCluster(plan("cpu.toml"), factory, fake_inputs=False)
    parts = [Part("text", "first"), Part("image", image(40, 56, 1)), Part("text", "second"),
             Part("image", image(56, 40, 2)), Part("text", "third")]
    one(c, RequestSpec(params={"max_tokens": 4}, parts=parts, input_modalities=["image", "text"],
                       output_modalities=["text"]))
    llm = next(m for m in made if isinstance(m, OrderLM))
    assert [entry for _, entry, label in llm.prefills if label == "main"] == ["text", "vit", "text", "vit", "text"]


def test_an_edit_leaves_no_routing_behind_for_the_next_understanding_request() -> None:
    """vllm-omni PR #6702: after an img2img request, later requests were misrouted through the gen path."""
    picture = image(48, 64, 3)
    fresh, _ = cluster("cpu.toml")
    expected = one(fresh, understand(picture, "what is it?"))["text"]
    used, _ = cluster("cpu.toml")
    one(used, edit(image(64, 64, 4), "make it blue", seed=5))
    after = one(used, understand(picture, "what is it?"))["text"]
    assert len(expected) > 0 and [int(t) for t in after] == [int(t) for t in expected]
