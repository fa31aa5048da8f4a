"""BAGEL's LLM component: the three KV labels against `interleave_inference` (models-wave2.md §1.6),
the walk's steps driven by hand; the starting noise; chunked and batched text; sampling."""

from __future__ import annotations

import pytest
import torch
from wgc.models.bagel.config import IM_START
from wgc.runtime.components.base import PARTIAL, CallError
from wgc.runtime.engines.kv_types import Write

from tests.models.bagel.helpers import LABELS, call, tiny_llm

Part = tuple[str, object]  # ("text", str) or ("image", (vae rows, vit rows))


def interleave(parts: list[Part], generating: bool) -> dict[str, tuple[int, int]]:
    """(KV length, rope position) per context after BAGEL's interleave_inference, from §1.6 alone."""
    ctx = {label: (0, 0) for label in LABELS}
    for kind, value in parts:
        if kind == "text":
            n = len(str(value).encode()) + 2  # <|im_start|> ... <|im_end|>
            ctx["cfg_text"] = ctx["main"]
            for label in ("main", "cfg_img"):
                length, rope = ctx[label]
                ctx[label] = (length + n, rope + n)
        else:
            vae, vit = value  # type: ignore[misc]
            length, rope = ctx["main"]
            for rows in [vae, vit] if generating else [vit]:  # the VAE block first when generating
                length, rope = length + rows + 2, rope + 1
            ctx["main"] = ctx["cfg_text"] = (length, rope)
    return ctx


def drive(m, request: int, parts: list[Part], generating: bool) -> None:
    """models/bagel.walk's prefill walks, in the flow's order."""
    for kind, value in parts:
        if kind == "text":
            m.fork(request, "cfg_text", "main")
            m.prefill_text([call(request, "main", value)])
            m.prefill_text([call(request, "cfg_img", value)])
            continue
        vae, vit = value
        if generating:
            m.prefill_vae([call(request, "main", torch.randn(vae, 64))])
        m.prefill_vit([call(request, "main", torch.randn(vit, 64))])
        m.fork(request, "cfg_text", "main")


CASES = {
    "text to image": ([("text", "a red fox")], True),
    "understanding": ([("image", (4, 6)), ("text", "what is it?")], False),
    "editing": ([("image", (4, 6)), ("text", "make it blue")], True),
    "interleaved": ([("text", "first"), ("image", (3, 5)), ("text", "then")], True),
    "image only": ([("image", (2, 3))], False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_labels_hold_what_interleave_inference_gives(case: str) -> None:
    parts, generating = CASES[case]
    m = tiny_llm(seed=21)
    drive(m, 5, parts, generating)
    expect = interleave(parts, generating)
    got = {}
    for label in LABELS:
        seq = m.kv.seq(5, label)
        got[label] = (m.kv.length(5, label), 0 if seq is None else seq.position)
    assert got == expect
    if generating:  # every label answers a velocity query
        z = m.init_latents([call(5, "", 256, 256)])[0]
        assert all(v.shape == (256, 64) for v in m.velocity([call(5, lab, z, 1.0) for lab in LABELS]))
    m.release(5)
    assert m.kv.pages.used_pages == 0 and not m.kv.seqs


def test_noise_is_seeded_per_request() -> None:
    a, b = tiny_llm(seed=22), tiny_llm(seed=22)
    alone = a.init_latents([call(9, "", 256, 256)])[0]
    batched = b.init_latents([call(3, "", 256, 256), call(9, "main", 256, 256)])
    assert torch.equal(alone, batched[1]) and not torch.equal(batched[0], batched[1])
    assert alone.shape == (256, 64) and abs(float(alone.mean())) < 0.05 and abs(float(alone.std()) - 1) < 0.05
    given = a.init_latents([call(1, "", 256, 256, 1234), call(2, "", 256, 256, 1234), call(2, "", 256, 256, 5)])
    assert torch.equal(given[0], given[1]) and not torch.equal(given[0], given[2])
    assert torch.equal(given[0], torch.randn(256, 64, generator=torch.Generator().manual_seed(1234)))
    other_base = tiny_llm(seed=23).init_latents([call(9, "", 256, 256)])[0]
    assert not torch.equal(other_base, alone)  # the component's base seed enters the derived one
    assert a.init_latents([call(1, "", 128, 256)])[0].shape == (128, 64)


def test_noise_refuses_sizes_the_model_cannot_place() -> None:
    m = tiny_llm(seed=24)
    with pytest.raises(CallError, match="multiples of 16"):
        m.init_latents([call(1, "", 250, 256)])
    with pytest.raises(CallError, match="larger than this model's 256x256"):
        m.init_latents([call(1, "", 512, 256)])


def test_chunked_text_prefill_equals_whole() -> None:
    whole, chunked = tiny_llm(seed=25), tiny_llm(seed=25)
    whole.prefill_text([call(1, "main", "a long prompt, chunked")])
    rounds = []
    while True:
        out = chunked.prefill_text([call(1, "main", "a long prompt, chunked")._replace(budget=5)])[0]
        rounds.append(out)
        if out is not PARTIAL:
            break
    assert rounds == [PARTIAL] * 4 + [None]  # 24 tokens, 5 a round
    k1, v1 = whole.kv._read(1, "main")
    k2, v2 = chunked.kv._read(1, "main")
    assert torch.allclose(k1, k2, atol=1e-5) and torch.allclose(v1, v2, atol=1e-5)
    assert chunked.kv.seq(1, "main").position == 24 and not chunked._prompts


def test_prompt_is_wrapped_once() -> None:
    m = tiny_llm(seed=26)
    m.prefill_text([call(1, "main", "hi"), call(2, "main", "<|im_start|>hi<|im_end|>")])
    assert m.kv.seq(1, "main").tokens == m.kv.seq(2, "main").tokens == [m.map.to_model(t) for t in
                                                                          (IM_START, 104, 105, 151645)]


def test_sampling_is_per_request_whatever_the_batch() -> None:
    a, b = tiny_llm(seed=27), tiny_llm(seed=27)
    for m in (a, b):
        m.prefill_text([call(1, "main", "tell"), call(2, "main", "me")])
    alone, batched, prev_a, prev_b = [], [], IM_START, [IM_START, IM_START]
    for _ in range(6):
        prev_a = a.decode([call(1, "main", prev_a, 1.5)])[0]
        alone.append(prev_a)
        prev_b = b.decode([call(2, "main", prev_b[1], 0.0), call(1, "main", prev_b[0], 1.5)])[::-1]
        batched.append(prev_b[0])
    assert alone == batched
    assert all(t < 256 or t in (151644, 151645, 151652, 151653) for t in alone)  # Qwen ids out


def test_text_logits_keep_no_autograd_graph() -> None:
    m = tiny_llm(seed=27)
    m.prefill_text([call(1, "main", "tell")])
    logits = m.text_logits([Write(1, "main", [m.map.to_model(IM_START)], 1)])
    assert logits.grad_fn is None and not logits.requires_grad  # the LM head ran without recording a graph
