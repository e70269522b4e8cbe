"""The PyTorch operators under torch.compile(fullgraph=True), and their fake implementation.

Run by ctest through run.py, which reports the file skipped without torch or a GPU.
"""
import sys
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import flash_steps
import flash_steps.pytorch as fsp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import compile_one_step  # noqa: E402

#: The GPU steps that run on this GPU (the Hopper steps, built for sm_90a, run on Hopper only).
_CC = 10 * torch.cuda.get_device_capability()[0] + torch.cuda.get_device_capability()[1] if torch.cuda.is_available() else 0
GPU_STEPS = [s for s in flash_steps.gpu_steps() if s.compute_capability in (0, _CC)]
#: How far a block's output may move, relative to its largest value, between eager and
#: compiled runs (Inductor fuses the projections differently) and from the SDPA block:
#: a few rounding steps of the dtype.
TOLERANCE = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (2**-6, 2**-4), torch.float16: (2**-9, 2**-7)}


def make_qkv(b=2, h=4, n_q=128, n_kv=192, d=64, dtype=torch.float32):
    gen = torch.Generator("cuda").manual_seed(0)
    return tuple(torch.randn(b, h, n, d, device="cuda", generator=gen).to(dtype) for n in (n_q, n_kv, n_kv))


def own_dtype(step):
    return getattr(torch, step.dtypes[0])


@pytest.mark.parametrize("step", GPU_STEPS, ids=lambda s: s.name)
def test_opcheck_schema_fake_and_dispatch(step):
    # torch.library.opcheck: the schema matches what the operator does, the fake
    # implementation's outputs match the real ones' (shape, dtype, strides), and
    # AOTAutograd can trace it with dynamic shapes.
    for dtype in step.dtypes:  # every dtype the step takes: the fake's O dtype follows Q's
        q, k, v = make_qkv(dtype=getattr(torch, dtype))
        torch.library.opcheck(fsp.OPS[step.name], (q, k, v, True, 0.125))


@pytest.mark.parametrize("step", GPU_STEPS, ids=lambda s: s.name)
def test_the_fake_implementation_runs_nothing(step):
    op = getattr(torch.ops.flash_steps, step.name)
    dtype = own_dtype(step)
    with FakeTensorMode() as mode:
        q, k, v = (mode.from_tensor(x) for x in make_qkv(3, 2, 1000, 77, 64, dtype=dtype))
        o, lse = op(q, k, v, False, 0.125)
    assert isinstance(o, FakeTensor) and isinstance(lse, FakeTensor)
    assert o.shape == (3, 2, 1000, 64) and lse.shape == (3, 2, 1000)
    assert o.dtype == dtype and lse.dtype == torch.float32 and o.device.type == "cuda"  # L is fp32 always
    # Meta tensors (no data at all) take the same path.
    o, lse = op(*(torch.empty(1, 2, 5, 32, device="meta", dtype=dtype) for _ in range(3)), True, 0.5)
    assert o.device.type == "meta" and o.shape == (1, 2, 5, 32) and lse.shape == (1, 2, 5)
    assert o.dtype == dtype and lse.dtype == torch.float32


@pytest.mark.parametrize("step", GPU_STEPS, ids=lambda s: s.name)
def test_torch_compile_fullgraph_traces_through_the_step(step):
    torch._dynamo.reset()
    # Inductor's code generation takes seconds: for the default step only; the others
    # are traced with fullgraph=True by a backend that keeps the graph.
    r = compile_one_step.run(step.name, batch=2, seq=256, repeat=3, inductor=step.name == fsp.DEFAULT_STEP)
    assert r["graphs"] == 1 and r["graph_breaks"] == 0
    assert len(r["op_nodes"]) == 1 and f"flash_steps.{step.name}" in r["op_nodes"][0], r["op_nodes"]
    assert r["dtype"] == step.dtypes[0]
    to_eager, to_sdpa = TOLERANCE[own_dtype(step)]
    assert r["max_diff_compiled_vs_eager"] <= to_eager * max(1.0, r["max_abs"])
    assert r["max_diff_vs_sdpa"] <= to_sdpa * max(1.0, r["max_abs"])


@pytest.mark.parametrize("dtype", sorted({d for s in GPU_STEPS for d in s.dtypes}))
def test_dynamic_shapes_compile_once_for_many_lengths(dtype):
    # aot_eager: AOTAutograd traces with FakeTensors of symbolic sizes (the fake
    # implementation at work) without Inductor's code generation.
    torch._dynamo.reset()
    # The last GPU step that takes this dtype.
    step = [s for s in GPU_STEPS if dtype in s.dtypes][-1].name
    compiled = torch.compile(lambda q, k, v: fsp.scaled_dot_product_attention(q, k, v, is_causal=True, step=step),
                             fullgraph=True, dynamic=True, backend="aot_eager")
    for n in (64, 100, 257):
        q, k, v = make_qkv(1, 2, n, n, 64, dtype=getattr(torch, dtype))
        expected = fsp.scaled_dot_product_attention(q, k, v, is_causal=True, step=step)
        torch.testing.assert_close(compiled(q, k, v), expected, rtol=0, atol=0)


def test_the_default_step_is_chosen_inside_a_fullgraph_compile():
    # default_step(q) is plain Python over the steps' lists and q's dtype, d and GPU: traced
    # by Dynamo without a graph break, once per dtype and d.
    torch._dynamo.reset()
    fsp._CAPABILITY.clear()  # asked for under tracing, not read from an eager call's cache
    compiled = torch.compile(lambda q, k, v: fsp.scaled_dot_product_attention(q, k, v, is_causal=True),
                             fullgraph=True, backend="aot_eager")
    for dtype in sorted({d for s in GPU_STEPS for d in s.dtypes}):
        q, k, v = make_qkv(1, 2, 100, 100, 64, dtype=getattr(torch, dtype))
        expected, _ = getattr(torch.ops.flash_steps, fsp.default_step(q))(q, k, v, True, None)
        torch.testing.assert_close(compiled(q, k, v), expected, rtol=0, atol=0)
