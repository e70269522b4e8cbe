"""A small Llama from transformers on a GPU step, against SDPA (python/examples/llama_on_a_step.py).

Run by ctest through run.py, which reports the file skipped without torch, transformers or a GPU.
"""
import sys
from pathlib import Path

import pytest

import flash_steps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import llama_on_a_step  # noqa: E402


# The comparison runs the model in float32 (its tolerance is float32's): the steps that take
# float32 tensors. The bf16/fp16 steps are judged against SDPA in test_torch_gpu.py.
@pytest.mark.parametrize("step", [s for s in flash_steps.gpu_steps() if "float32" in s.dtypes], ids=lambda s: s.name)
def test_a_llama_on_the_step_gives_sdpas_logits(step):
    r = llama_on_a_step.compare(step.name, layers=2, seq=256, batch=2, repeat=3)
    assert r["passed"], (f"{step.name}: max logit error {r['err_step']:.3g} vs float64 exceeds "
                         f"2 x SDPA float32's {r['err_sdpa']:.3g} + 1e-6")
