"""A small Llama from transformers on a GPU step, against SDPA (python/examples/llama_on_a_step.py).

Run by ctest through run.py, which reports the file skipped without torch, transformers or a GPU.
"""
import sys
from pathlib import Path

import pytest

import flash_steps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import llama_on_a_step  # noqa: E402


import torch  # noqa: E402

# The steps whose machine code runs on this GPU (the Hopper steps need compute capability 9.0).
_CC = 10 * torch.cuda.get_device_capability()[0] + torch.cuda.get_device_capability()[1]
RUNNABLE = [s for s in flash_steps.gpu_steps() if s.compute_capability in (0, _CC)]


# The model runs in the step's own dtype, judged by the tolerance of that dtype: float32
# for steps 4-8, bfloat16 for the steps from 9 on.
@pytest.mark.parametrize("step", RUNNABLE, ids=lambda s: s.name)
def test_a_llama_on_the_step_gives_sdpas_logits(step):
    dtype = step.dtypes[0]
    r = llama_on_a_step.compare(step.name, layers=2, seq=256, batch=2, repeat=3, dtype=dtype)
    assert r["passed"], (f"{step.name}: max logit error {r['err_step']:.3g} vs float64 exceeds "
                         f"2 x SDPA {dtype}'s {r['err_sdpa']:.3g} + 1e-6")


def test_a_dtype_the_step_does_not_take_is_refused():
    fp32 = [s for s in flash_steps.gpu_steps() if "float32" in s.dtypes]
    if fp32:
        with pytest.raises(ValueError, match=f"^{fp32[0].name} computes in float32, not bfloat16"):
            llama_on_a_step.compare(fp32[0].name, dtype="bfloat16")
