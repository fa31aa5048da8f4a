"""π0.5's components against transformers 5.24 on the same tiny random weights: SigLIP + projector
against PaliGemma's get_image_features, the prefix's KV against PaliGemma's language model cache,
and the π0 mode of the whole chunk against PI0ForConditionalGeneration.sample_actions with the same
noise (covering the prefix, the expert attending to its KV without writing it, positions, the
suffix mask and the Euler loop), and the π0.5 velocity with the adaRMS reduction against PI0's
Gemma expert over the same prefix cache with π0.5's mask. π0.5 itself has no installable reference
(models-wave2.md §4.6): its other pieces are checked in test_expert.py and test_prompt.py."""

from __future__ import annotations

import torch
from wgc.models.pi05 import Stats
from wgc.models.pi05.config import Pi05Config
from wgc.models.pi05.weights import checkpoint_name
from wgc.runtime.components.base import Call

from tests.models.pi05.helpers import chunk, components, images, load_lerobot, pixels
from tests.models.pi05.reference import lerobot_state_dict, reference

PI0 = Pi05Config.preset("tiny").as_pi0()
FULL = Stats.identity(PI0.action_dim, PI0.action_dim)  # compare all 32 dims, the state as given


def loaded() -> tuple:
    model = reference(PI0)
    vit, llm = components(PI0, FULL)
    load_lerobot(vit, llm, lerobot_state_dict(model))
    return model, vit, llm


def ids_and_inputs(llm, cameras: int, task: str) -> tuple[torch.Tensor, torch.Tensor]:
    text = llm.prompt_ids(Call(99, "", (None, task, torch.zeros(PI0.action_dim))))
    llm.release(99)
    image_token = PI0.prefix.vocab - 1
    ids = torch.tensor([[image_token] * (cameras * PI0.vision.tokens) + text])  # [1, L]
    return ids, torch.ones_like(ids)


def test_siglip_and_projector_match_paligemma_image_features() -> None:
    model, vit, _ = loaded()
    imgs = images(3, PI0.vision.image_size)
    ours = vit.encode([Call(0, "", (imgs[:2],)), Call(1, "", (imgs[2:],))])  # two calls, one forward
    with torch.no_grad():
        theirs = model.model.vlm.get_image_features(pixels(imgs)).pooler_output  # [3, 16, 64]
    torch.testing.assert_close(torch.cat(ours), theirs, rtol=1e-5, atol=1e-5)


def test_prefix_kv_matches_paligemma_language_model_cache() -> None:
    model, vit, llm = loaded()
    imgs, task = images(2, PI0.vision.image_size, seed=1), "stack the blocks"
    ids, mask = ids_and_inputs(llm, 2, task)
    x = vit.encode([Call(5, "", (imgs,))])[0]
    llm.prefill([Call(5, "", (x, task, torch.zeros(PI0.action_dim)))])
    k, v = llm.kv._read(5, llm.default_label())  # [layers, L + 1 (the state token), kv_heads, head_dim]
    with torch.no_grad():
        embeds = model.model.embed_prefix(ids, pixels(imgs)[None], torch.ones(1, 2, dtype=torch.bool))
        cache = model.model.vlm(inputs_embeds=embeds, attention_mask=mask, position_ids=mask.cumsum(-1) - 1,
                                token_type_ids=torch.zeros_like(ids), use_cache=True).cache
    n = ids.shape[1]
    assert k.shape[1] == n + 1
    for layer in range(PI0.prefix.layers):
        theirs_k = cache.layers[layer].keys[0].transpose(0, 1)  # [L, kv_heads, head_dim]
        theirs_v = cache.layers[layer].values[0].transpose(0, 1)
        torch.testing.assert_close(k[layer, :n], theirs_k, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(v[layer, :n], theirs_v, rtol=1e-5, atol=1e-5)


def test_pi0_mode_matches_sample_actions_with_the_same_noise() -> None:
    model, vit, llm = loaded()
    imgs, task = images(3, PI0.vision.image_size, seed=2), "open the drawer"
    state = torch.randn(PI0.action_dim, generator=torch.Generator().manual_seed(3)).clamp(-1, 1)
    noise = torch.randn(PI0.chunk, PI0.action_dim, generator=torch.Generator().manual_seed(4))
    ours = chunk(vit, llm, imgs, task, state, noise, request=7)
    ids, mask = ids_and_inputs(llm, 3, task)
    with torch.no_grad():
        theirs = model.sample_actions(state=state[None], input_ids=ids, pixel_values=pixels(imgs)[None],
                                      noise=noise[None], attention_mask=mask,
                                      pixel_attention_mask=torch.ones(1, 3, dtype=torch.bool))[0]
    assert float((ours - noise).abs().max()) > 0.1  # the flow moved the chunk
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)  # measured 1.5e-6; a position off by one: 2e-4


def test_pi05_velocity_with_the_adarms_reduction_equals_the_gemma_expert_over_the_prefix_cache() -> None:
    """models-wave2 §4.6 (4): the π0.5 component on PI0's weights, each adaRMS with dense weight 0 and
    bias [w, 0, 1]; transformers' `dit` on the same action rows against the same prefix cache, with
    π0.5's mask (every action token sees the whole prefix and every other action; no state token) and
    positions after the prefix."""
    tiny = Pi05Config.preset("tiny")
    model, state = reference(PI0), lerobot_state_dict(reference(PI0))
    vit, llm = components(tiny, FULL)
    expert = "paligemma_with_expert.gemma_expert.model."
    with torch.no_grad():
        for part, module in (("tower", vit.model), ("prefix", llm.prefix), ("expert", llm.expert)):
            name = checkpoint_name(part)
            for n, p in module.named_parameters():
                if ".dense." not in n:
                    p.copy_(state[name(n)])
        norms = [(layer.input_layernorm, f"layers.{i}.input_layernorm.weight") for i, layer in enumerate(llm.expert.layers)]
        norms += [(layer.post_attention_layernorm, f"layers.{i}.post_attention_layernorm.weight")
                  for i, layer in enumerate(llm.expert.layers)] + [(llm.expert.norm, "norm.weight")]
        for norm, key in norms:
            w = state[expert + key]
            norm.dense.weight.zero_()
            norm.dense.bias.copy_(torch.cat([w, torch.zeros_like(w), torch.ones_like(w)]))
        for head in ("action_in_proj", "action_out_proj"):
            getattr(llm.heads, head).load_state_dict({k.split(".")[-1]: v for k, v in state.items()
                                                      if k.startswith(head + ".")})
    imgs, task = images(2, PI0.vision.image_size, seed=3), "close the lid"
    x = vit.encode([Call(1, "", (imgs,))])[0]
    llm.prefill([Call(1, "", (x, task, torch.zeros(PI0.action_dim)))])
    text = llm.prompt_ids(Call(9, "", (None, task, torch.zeros(PI0.action_dim))))
    llm.release(9)
    ids = torch.tensor([[PI0.prefix.vocab - 1] * (2 * PI0.vision.tokens) + text])
    mask, n = torch.ones_like(ids), ids.shape[1]
    a = torch.randn(PI0.chunk, PI0.action_dim, generator=torch.Generator().manual_seed(1))
    ours = llm.velocity([Call(1, "", (a, 0.7))])[0]
    with torch.no_grad():
        embeds = model.model.embed_prefix(ids, pixels(imgs)[None], torch.ones(1, 2, dtype=torch.bool))
        cache = model.model.vlm(inputs_embeds=embeds, attention_mask=mask, position_ids=mask.cumsum(-1) - 1,
                                token_type_ids=torch.zeros_like(ids), use_cache=True).cache
        visible = torch.zeros(1, 1, PI0.chunk, n + PI0.chunk)  # additive: everything visible
        hidden = model.model.dit(inputs_embeds=model.embed_action_time.action_in_proj(a)[None], attention_mask=visible,
                                 position_ids=(n + torch.arange(PI0.chunk))[None], cache=cache).last_hidden_state
        theirs = model.action_out_proj(hidden)[0]
    assert llm.kv.length(1, llm.default_label()) == n  # π0.5: no state token in the cache
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)  # measured 0; positions off by one: 3e-5
