"""CUDA-graph replay equals eager execution (GPU only; skipped cleanly without CUDA)."""

from __future__ import annotations

import pytest
import torch


def _cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")


@pytest.mark.gpu
def test_replay_equals_eager_for_every_bucket_and_padded_batches() -> None:
    _cuda()
    from wgc.runtime.engines.cuda_graphs import GraphRunner

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.SiLU(), torch.nn.Linear(256, 64)).cuda()

    def step(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return mlp(inputs["x"])

    runner = GraphRunner(step, lambda b: {"x": torch.zeros(b, 64, device="cuda")}, [1, 8, 32])
    with torch.no_grad():
        runner.capture()
        assert sorted(runner.graphs) == [1, 8, 32] and not runner.failed
        for batch in (1, 3, 8, 20, 32, 50):
            x = torch.randn(batch, 64, device="cuda")
            got = runner.run({"x": x}, batch)
            assert got.shape == (batch, 64)
            assert torch.allclose(got, mlp(x), atol=1e-5)


@pytest.mark.gpu
def test_a_failing_capture_is_reported_and_that_bucket_runs_eagerly() -> None:
    _cuda()
    from wgc.runtime.engines.cuda_graphs import GraphRunner

    def step(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("operation not permitted when stream is capturing")
        return inputs["x"] * 2

    runner = GraphRunner(step, lambda b: {"x": torch.zeros(b, 4, device="cuda")}, [4])
    messages: list[str] = []
    runner.capture(messages.append)
    assert 4 in runner.failed and "eagerly" in messages[0]
    x = torch.ones(4, 4, device="cuda")
    assert torch.equal(runner.run({"x": x}, 4), x * 2)


def test_importing_the_engines_does_not_initialise_cuda() -> None:
    import subprocess
    import sys

    code = ("import torch, wgc.runtime.engines.cuda_graphs, wgc.runtime.engines.attention; "
            "print(torch.cuda.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
