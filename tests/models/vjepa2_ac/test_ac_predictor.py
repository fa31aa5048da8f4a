"""The action-conditioned predictor over the KV engine (models/vjepa2_ac/ac_predictor.py) against a
plain dense reimplementation of upstream's (reference.py): the cached rollout equals recomputing the
whole prefix at every step, per step; appending a frame leaves earlier outputs unchanged; the block
mask equals the loop-built dense one; H steps are H frame blocks of work, not H(H+1)/2; candidates
equal a loop of single rollouts; requests of different horizons share each step's forward."""

from __future__ import annotations

import pytest
import torch
from wgc.models.vjepa2_ac.ac_net import block_causal_mask
from wgc.runtime.components.base import CallError

from tests.models.vjepa2_ac.helpers import call, frame, randn, tiny_ac
from tests.models.vjepa2_ac.reference import Reference, loop_mask, recompute_rollout

TOL = 2e-5


def rollout(ac, request: int, z, actions, states, label: str = "") -> list[torch.Tensor]:
    out = []
    for t in range(actions.shape[0]):
        (z,) = ac.step([call(request, z, actions[t], states[t], label=label)])
        out.append(z)
    return out


def test_cached_rollout_equals_recomputing_the_prefix_at_every_step() -> None:
    ac = tiny_ac()
    z0, actions, states = frame(ac, 1), randn(7, 7, seed=2), randn(7, 7, seed=3)
    cached = rollout(ac, 1, z0, actions, states)
    reference = recompute_rollout(Reference(ac.net), z0, actions, states)
    for step, (got, want) in enumerate(zip(cached, reference)):
        assert torch.allclose(got, want, atol=TOL), (step, float((got - want).abs().max()))
    # the predictions depend on the actions: another action at step 2 changes steps 2.. only
    changed = actions.clone()
    changed[2] += 1.0
    other = rollout(ac, 2, z0, changed, states)
    assert all(torch.equal(a, b) for a, b in zip(cached[:2], other[:2]))
    assert not torch.allclose(cached[2], other[2], atol=1e-3)


def test_appending_a_frame_leaves_earlier_outputs_unchanged() -> None:
    ac = tiny_ac(seed=1)
    ref = Reference(ac.net)
    c = ac.config
    z = randn(5 * c.tokens_per_frame, c.embed, seed=4)[None]
    actions, states = randn(1, 5, 7, seed=5), randn(1, 5, 7, seed=6)
    four = ref(z[:, :4 * c.tokens_per_frame], actions[:, :4], states[:, :4])
    five = ref(z, actions, states)
    assert torch.allclose(five[:, :4 * c.tokens_per_frame], four, atol=1e-6)
    # and in the cache: the keys written for the first frames do not move when a frame is appended
    z0 = frame(ac, 7)
    (z1,) = ac.step([call(1, z0, actions[0, 0], states[0, 0])])
    k_before = ac.kv.export_label(1, ac.default_label())["k"]
    ac.step([call(1, z1, actions[0, 1], states[0, 1])])
    k_after = ac.kv.export_label(1, ac.default_label())["k"]
    assert torch.equal(k_after[:, :k_before.shape[1]], k_before)
    assert k_after.shape[1] == 2 * c.block


def test_the_block_mask_equals_the_dense_loop_built_mask() -> None:
    for frames, grid in ((1, 2), (3, 2), (5, 4)):
        assert torch.equal(block_causal_mask(frames, 2 + grid * grid), loop_mask(frames, grid))
    mask = block_causal_mask(3, 4)
    assert mask[4, 7] and not mask[3, 4] and mask[11, 0]  # inside a frame both ways; never a later frame


def test_the_forward_over_a_dense_mask_equals_the_reference() -> None:
    ac = tiny_ac(seed=2)
    c = ac.config
    z = randn(1, 3, c.tokens_per_frame, c.embed, seed=8)
    actions, states = randn(1, 3, 7, seed=9), randn(1, 3, 7, seed=10)
    with torch.no_grad():
        dense = ac.net.forward_dense(z, actions, states)  # [1, 3, HW, embed]
    want = Reference(ac.net)(z.flatten(1, 2), actions, states)
    assert torch.allclose(dense.flatten(1, 2), want, atol=TOL)


def test_h_steps_do_h_frame_blocks_of_work() -> None:
    ac = tiny_ac()
    rollout(ac, 1, frame(ac, 1), randn(6, 7, seed=2), randn(6, 7, seed=3))
    assert ac.stats["frame_blocks"] == 6 and ac.stats["forwards"] == 6  # recomputing: 1 + 2 + ... + 6 = 21
    assert ac.kv.length(1, ac.default_label()) == 6 * ac.config.block


def test_candidates_equal_a_loop_of_single_rollouts_and_free_their_labels() -> None:
    ac = tiny_ac(seed=3)
    c = ac.config
    clip = torch.cat([frame(ac, 20), frame(ac, 21)])  # two context frames: one history frame in the label
    history_a, history_s = randn(1, 7, seed=22), randn(1, 7, seed=23)
    (last,) = ac.context([call(1, clip, history_a, history_s)])
    assert torch.equal(last, clip[c.tokens_per_frame:])
    used = ac.kv.pages.used_pages
    actions, states = randn(4, 3, 7, seed=24), randn(4, 3, 7, seed=25)
    shared, advance = [], ac.advance

    def spy(items):
        shared.append(ac.kv.pages.counters()["kv_pages_shared"])
        return advance(items)

    ac.advance = spy
    (finals,) = ac.candidates([call(1, last, actions, states)])
    # the history's 18 tokens fill one page of 16 and start a second: both shared by the 4 forks, then
    # the first step copies the partial page per candidate and the full one stays shared
    assert shared == [2, 1, 1]
    assert finals.shape == (4, c.tokens_per_frame, c.embed)
    assert ac.kv.pages.used_pages == used and ac.kv.pages.counters()["kv_forks"] == 4  # every fork dropped
    assert ac.kv.length(1, ac.default_label()) == c.block  # the context label is as it was
    for k in range(4):
        ac.context([call(100 + k, clip, history_a, history_s)])
        alone = rollout(ac, 100 + k, last, actions[k], states[k])
        assert torch.allclose(finals[k], alone[-1], atol=TOL), k
    assert not torch.allclose(finals[0], finals[1], atol=1e-3)


def test_requests_of_different_horizons_share_each_steps_forward() -> None:
    ac = tiny_ac(seed=4)
    starts = [frame(ac, 30 + r) for r in range(3)]
    acts = [randn(h, 7, seed=40 + h) for h in (2, 5, 3)]
    sts = [randn(h, 7, seed=50 + h) for h in (2, 5, 3)]
    alone = [rollout(ac, 10 + r, starts[r], acts[r], sts[r]) for r in range(3)]
    forwards = ac.stats["forwards"]
    current, got = list(starts), [[], [], []]
    for t in range(5):
        live = [r for r in range(3) if t < acts[r].shape[0]]
        outs = ac.step([call(r, current[r], acts[r][t], sts[r][t]) for r in live])
        for r, z in zip(live, outs):
            current[r] = z
            got[r].append(z)
    assert ac.stats["forwards"] - forwards == 5  # one forward a step, whatever the mix of lengths
    for r in range(3):
        assert len(got[r]) == acts[r].shape[0]
        assert all(torch.allclose(a, b, atol=TOL) for a, b in zip(got[r], alone[r])), r


def test_a_rollout_past_the_mask_fails_alone_with_the_numbers() -> None:
    ac = tiny_ac()
    c = ac.config
    clip = torch.cat([frame(ac, s) for s in range(3)])
    ac.context([call(1, clip, randn(2, 7, seed=1), randn(2, 7, seed=2))])
    ok = call(2, frame(ac, 9), randn(4, c.max_frames, 7, seed=3), randn(4, c.max_frames, 7, seed=4))
    late = call(1, clip[-c.tokens_per_frame:], randn(4, c.max_frames - 1, 7, seed=3), randn(4, c.max_frames - 1, 7, seed=4))
    fine, bad = ac.demands("candidates", [ok, late])
    assert fine.error == ""
    assert "33 frame blocks" in bad.error and f"the {c.max_frames} the predictor covers" in bad.error
    with pytest.raises(CallError, match="`frame` must be a tensor"):
        ac.step([call(3, torch.zeros(5, c.embed), torch.zeros(7), torch.zeros(7))])
    with pytest.raises(CallError, match=r"`actions` must be a tensor \[2, 7\]"):
        ac.context([call(4, clip, torch.zeros(2, 6), torch.zeros(2, 7))])


def test_candidates_of_a_preempted_context_equal_those_of_a_resident_one() -> None:
    """The scheduler may move a request's pages to host memory between CEM iterations: the candidates
    fork the swapped label (each brought back into its own pages) and score the same."""
    ac = tiny_ac(seed=3)
    clip = torch.cat([frame(ac, s) for s in (20, 21, 22)])
    history = randn(2, 7, seed=22), randn(2, 7, seed=23)
    actions, states = randn(3, 2, 7, seed=24), randn(3, 2, 7, seed=25)
    (last,) = ac.context([call(1, clip, *history)])
    (resident,) = ac.candidates([call(1, last, actions, states)])
    ac.context([call(2, clip, *history)])
    assert ac.preempt(2) > 0 and ac.counters()["kv_swapped_labels"] == 1
    (swapped,) = ac.candidates([call(2, last, actions, states)])
    assert torch.equal(swapped, resident)
    ac.step([call(2, last, actions[0, 0], states[0, 0])])  # the context itself comes back for the next step
    assert ac.kv.length(2, ac.default_label()) == 3 * ac.config.block
