"""What the policy route (runtime/http/native/policy.py) checks before a request runs: the camera images'
size and count, the state's length and the action chunk's shape, for the weights the workers load
(WGC_PI05_DIR's checkpoint, else the tiny preset). Looked up as the module hook `policy_shape(spec)`."""

from __future__ import annotations

from typing import Any

from wgc.models.pi05.config import Pi05Config
from wgc.models.pi05.vision import KNOB

from wgc import settings
from wgc.plan.model import ComponentSpec


def policy_shape(spec: ComponentSpec) -> dict[str, Any]:
    """{image_size, cameras, state_dim, chunk, action_dim} of the weights `spec`'s workers load."""
    from wgc.models.pi05.llm import TINY_STATS

    directory = settings.weights_dir(KNOB)
    if directory is None:
        config, stats = Pi05Config.preset("tiny"), TINY_STATS
    else:
        from wgc.models.pi05.weights import Checkpoint

        checkpoint = Checkpoint(directory)
        config, stats = checkpoint.config, checkpoint.stats
    return {"image_size": config.vision.image_size, "cameras": config.cameras, "state_dim": stats.state_dim,
            "chunk": config.chunk, "action_dim": stats.action_dim}
