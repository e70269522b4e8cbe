"""The training example as a test: a tiny transformer trained with SDPA and with a step's
forward and backward from the same seed; the loss curves must agree (the example's
verdict: the final 50-step means within 2% of each other, each loss fallen by a factor
of at least 1.8). Every GPU step with a backward pass, in each of its dtypes that the
example trains in (fp32 and bf16).

Run by ctest through run.py, which reports the file skipped without a GPU or without a
PyTorch that flash_steps.pytorch accepts (>= 2.4).
"""
import sys
from pathlib import Path

import pytest

import flash_steps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import train_tiny_transformer  # noqa: E402


def _runs_here(step):
    """True when this machine's GPU runs `step` (the Hopper steps need compute capability 9.0)."""
    import torch
    if not torch.cuda.is_available():
        return True  # run.py reports the file skipped before any test runs
    major, minor = torch.cuda.get_device_capability()
    return step.compute_capability in (0, 10 * major + minor)


#: (step, --dtype): every GPU step with a backward pass that this GPU runs, in each of its dtypes
#: among fp32 and bf16.
RUNS = [(s, precision) for s in flash_steps.gpu_steps() if s.has_backward and _runs_here(s)
        for precision in ("fp32", "bf16") if train_tiny_transformer.DTYPES[precision] in s.dtypes]


@pytest.mark.parametrize("step, precision", RUNS, ids=[f"{s.name}-{precision}" for s, precision in RUNS])
def test_the_loss_curves_of_sdpa_and_the_step_agree(step, precision, tmp_path, capsys):
    heads = "4" if not step.head_dims or 32 in step.head_dims else "2"  # d = 32, or d = 64 (the Hopper steps)
    status = train_tiny_transformer.main(["--step", step.name, "--dtype", precision, "--heads", heads,
                                          "--csv", str(tmp_path / "loss.csv")])
    output = capsys.readouterr().out
    assert status == 0, output
    rows = (tmp_path / "loss.csv").read_text().splitlines()
    assert rows[0] == "step,loss_sdpa,loss_step" and len(rows) == 301, rows[:3]


def test_a_step_without_a_backward_is_refused(capsys):
    forward_only = [s for s in flash_steps.gpu_steps() if not s.has_backward]
    assert train_tiny_transformer.main(["--step", forward_only[0].name]) == 2
    assert "cannot train this float32 model" in capsys.readouterr().err


def test_the_verdict_fails_curves_that_disagree():
    # The rule can fail: a curve 3% above the other, or one that never fell.
    falling = [5.0 - 4.0 * i / 99 for i in range(100)]  # first 10 over last 50: 4.82 / 1.99, a drop of 2.4
    assert train_tiny_transformer.verdict(falling, falling, 0.02, 1.8)[0]
    assert not train_tiny_transformer.verdict(falling, [x * 1.03 for x in falling], 0.02, 1.8)[0]
    assert not train_tiny_transformer.verdict([5.0] * 100, [5.0] * 100, 0.02, 1.8)[0]
