"""The scorer's metrics and the CEM planner's pieces by their formulas (models-wave2.md §3.4): the
samples' clipping and seeding, the top-k update with its momenta, the final trajectory's gripper
rounding, and the poses a plan's states come from."""

from __future__ import annotations

import math

import pytest
import torch
from wgc.models.vjepa2_ac.planner import Planner, draw, final, initial, refit
from wgc.models.vjepa2_ac.poses import next_pose, rollout_states
from wgc.models.vjepa2_ac.scorer import Scorer
from wgc.runtime.components.base import CallError

from tests.models.vjepa2_ac.helpers import call, randn, spec


def test_the_metrics_by_formula_and_best_is_the_argmin() -> None:
    scorer = Scorer(spec("scorer", "Scorer", "stateless"), 0, "cpu")
    pred, goal = randn(3, 4, 5, seed=1), randn(4, 5, seed=2)
    pred[1] = goal + 0.01
    (l1,) = scorer.costs([call(1, pred, goal, "l1")])
    (l2,) = scorer.costs([call(1, pred, goal, "l2")])
    (cos,) = scorer.costs([call(1, pred, goal, "cosine")])
    for k in range(3):
        d = [float(a - b) for a, b in zip(pred[k].flatten(), goal.flatten())]
        assert math.isclose(float(l1[k]), sum(abs(x) for x in d) / 20, rel_tol=1e-5)
        assert math.isclose(float(l2[k]), math.sqrt(sum(x * x for x in d) / 20), rel_tol=1e-5)
        sims = [float(torch.dot(pred[k, t], goal[t]) / (pred[k, t].norm() * goal[t].norm())) for t in range(4)]
        assert math.isclose(float(cos[k]), 1 - sum(sims) / 4, rel_tol=1e-5, abs_tol=1e-6)
    assert scorer.best([call(1, l1), call(2, l2), call(3, cos)]) == [1, 1, 1]
    with pytest.raises(CallError, match="unknown metric 'l3'"):
        scorer.costs([call(1, pred, goal, "l3")])


def test_samples_are_clipped_seeded_and_never_rotate() -> None:
    dist = initial(3, 0.05)
    assert dist[0].abs().sum() == 0 and torch.all(dist[1, :, :3] == 0.05) and torch.all(dist[1, :, 6] == 1.0)
    a = draw(dist, 500, 0.05, torch.Generator().manual_seed(0))
    assert a.shape == (500, 3, 7)
    assert a[..., :3].abs().max() <= 0.05 and a[..., 6].abs().max() <= 0.75 and a[..., 3:6].abs().max() == 0
    assert (a[..., :3].abs() == 0.05).any() and (a[..., 6].abs() == 0.75).any()  # the bounds bind
    planner = Planner(spec("planner", "Planner", "stateless"), 0, "cpu")
    one, same, other = planner.sample([call(1, dist, 2, 8, 0.05, 7), call(2, dist, 2, 8, 0.05, 7), call(1, dist, 3, 8, 0.05, 7)])
    assert torch.equal(one, same) and not torch.equal(one, other)  # the seed and the iteration, not the request
    derived = planner.sample([call(1, dist, 2, 8, 0.05, -1), call(2, dist, 2, 8, 0.05, -1)])
    assert not torch.equal(derived[0], derived[1])  # seed -1: from the request


def test_the_update_keeps_the_top_k_with_momentum() -> None:
    dist = initial(2, 0.05)
    dist[0, :, 0] = 0.02
    actions = randn(6, 2, 7, seed=3)
    costs = torch.tensor([5.0, 1.0, 4.0, 0.5, 3.0, 2.0])
    new = refit(dist, actions, costs, 3, (0.1, 0.2, 0.3, 0.4))
    top = actions[[3, 1, 5]]
    assert torch.allclose(new[0, :, :3], top.mean(0)[:, :3] * 0.9 + dist[0, :, :3] * 0.1)
    assert torch.allclose(new[0, :, 6], top.mean(0)[:, 6] * 0.7 + dist[0, :, 6] * 0.3)
    assert torch.allclose(new[1, :, :3], top.std(0)[:, :3] * 0.8 + dist[1, :, :3] * 0.2)
    assert torch.allclose(new[1, :, 6], top.std(0)[:, 6] * 0.6 + dist[1, :, 6] * 0.4)
    assert new[:, :, 3:6].abs().sum() == 0
    planner = Planner(spec("planner", "Planner", "stateless"), 0, "cpu")
    with pytest.raises(CallError, match="topk 7 must be between 1 and the 6 samples"):
        planner.update([call(1, dist, actions, costs, 7, 0.1, 0.1, 0.1, 0.1)])


def test_the_trajectory_is_the_mean_with_small_gripper_values_zeroed() -> None:
    dist = torch.zeros(2, 3, 7)
    dist[0, :, 0] = torch.tensor([0.01, -0.02, 0.03])
    dist[0, :, 4] = 0.5  # a rotation in the mean never reaches the trajectory
    dist[0, :, 6] = torch.tensor([0.2, -0.3, 0.26])
    out = final(dist)
    assert out.shape == (1, 3, 7)
    assert out[0, :, 0].tolist() == pytest.approx([0.01, -0.02, 0.03])
    assert out[0, :, 6].tolist() == pytest.approx([0.0, -0.3, 0.26]) and out[0, :, 3:6].abs().sum() == 0


def test_poses_add_position_compose_rotation_and_clip_the_gripper() -> None:
    pose = torch.tensor([0.1, 0.2, 0.3, 0.4, -0.5, 0.6, 0.9])
    act = torch.tensor([0.01, -0.02, 0.03, 0.0, 0.0, 0.0, 0.5])
    nxt = next_pose(pose, act)
    assert torch.allclose(nxt[:3], pose[:3] + act[:3]) and float(nxt[6]) == 1.0  # the gripper clipped to [0, 1]
    assert torch.allclose(nxt[3:6], pose[3:6], atol=1e-6)  # no rotation: the same angles
    yaw = next_pose(torch.tensor([0, 0, 0, 0, 0, 0.3, 0.0]), torch.tensor([0, 0, 0, 0, 0, 0.2, -0.4]))
    assert torch.allclose(yaw[3:6], torch.tensor([0.0, 0.0, 0.5]), atol=1e-6) and float(yaw[6]) == 0.0
    roll = next_pose(torch.tensor([0, 0, 0, 0.3, 0, 0, 0.0]), torch.tensor([0, 0, 0, 0.2, 0, 0, 0.0]))
    assert torch.allclose(roll[3:6], torch.tensor([0.5, 0.0, 0.0]), atol=1e-6)
    states = rollout_states(pose, act.expand(2, 3, 7))
    assert states.shape == (2, 3, 7) and torch.equal(states[:, 0], pose.expand(2, 7))
    assert torch.allclose(states[0, 2, :3], pose[:3] + 2 * act[:3])
