"""The GPU steps on PyTorch CUDA tensors: against SDPA, on the caller's stream, through
DLPack without a copy, and every bad input refused with the steps' one-line message.

Run by ctest through run.py, which reports the file skipped without torch or a GPU.

Tolerance, as scripts/gpu/check_pytorch.py states it: with float64 SDPA (math backend) as
the reference, a step's max error must be at most twice that of PyTorch's own float32
SDPA (math backend, TF32 off) on the same inputs, plus 1e-5; and the C++ tests' rule
(flash_steps.check_result: twice fp32 standard attention's error + 1e-6) on the same
numbers.

Steps that compute in bf16/fp16 take bfloat16/float16 tensors and are judged by
FlashAttention-2's same-precision rule: the reference is fp64 attention of the very
16-bit inputs; O's max error must be at most twice that of SDPA's math backend run in
the same dtype, plus a floor of one rounding step of that dtype at O's magnitude
(2^-8 x max(1, max|O|) for bf16, 2^-11 x ... for fp16: O itself is rounded to it); L's
at most twice that of fp32 logsumexp of the same inputs' fp32 scores, plus
1e-5 x max(1, max|L|).
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flash_steps
import flash_steps.pytorch as fsp

#: The GPU steps that run on this GPU (the Hopper steps, built for sm_90a, run on Hopper only).
_CC = 10 * torch.cuda.get_device_capability()[0] + torch.cuda.get_device_capability()[1] if torch.cuda.is_available() else 0
GPU_STEPS = [s for s in flash_steps.gpu_steps() if s.compute_capability in (0, _CC)]
FP32_STEPS = [s for s in GPU_STEPS if "float32" in s.dtypes]
#: (step, dtype) for every 16-bit dtype of every step that computes in bf16/fp16.
HALF_CASES = [(s, d) for s in GPU_STEPS for d in s.dtypes if d != "float32"]
DEVICE = "cuda"
#: One rounding step (unit roundoff) of each 16-bit dtype: the floor of the same-precision rule.
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def own_dtype(step):
    """The torch dtype a step computes in natively (its first)."""
    return getattr(torch, step.dtypes[0])

# (B, H, N_q, N_kv, d, causal, scale or None)
SHAPES = [
    (2, 3, 257, 100, 64, True, None),
    (1, 2, 100, 333, 128, False, None),
    (1, 4, 33, 33, 32, True, 0.3),
    (2, 2, 129, 257, 96, True, None),
    (1, 1, 1, 17, 64, False, -0.5),
]


@pytest.fixture(autouse=True)
def exact_float32():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def make_qkv(b, h, n_q, n_kv, d, seed=0, dtype=torch.float32):
    gen = torch.Generator(DEVICE).manual_seed(seed)
    q = torch.randn(b, h, n_q, d, device=DEVICE, generator=gen)
    k = torch.randn(b, h, n_kv, d, device=DEVICE, generator=gen)
    v = torch.randn(b, h, n_kv, d, device=DEVICE, generator=gen)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def sdpa_reference(q, k, v, causal, scale):
    """O and L in float64, and O of PyTorch's float32 SDPA (math backend), the yardstick."""
    scale_used = 1 / q.shape[-1] ** 0.5 if scale is None else scale
    with sdpa_kernel(SDPBackend.MATH):
        o64 = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, scale=scale)
        o32 = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    s = (q.double() @ k.double().transpose(-2, -1)) * scale_used
    if causal:
        hidden = torch.ones(s.shape[-2:], dtype=torch.bool, device=DEVICE).triu(1)
        s = s.masked_fill(hidden, float("-inf"))
    return o64, torch.logsumexp(s, dim=-1), o32


def lse_fp64_and_fp32(q, k, v, causal, scale):
    """L in fp64 and in fp32 (scores of the same inputs in fp32, no TF32) of q, k, v of any dtype."""
    scale_used = 1 / q.shape[-1] ** 0.5 if scale is None else scale
    out = []
    for dtype in (torch.float64, torch.float32):
        s = (q.to(dtype) @ k.to(dtype).transpose(-2, -1)) * scale_used
        if causal:
            hidden = torch.ones(s.shape[-2:], dtype=torch.bool, device=DEVICE).triu(1)
            s = s.masked_fill(hidden, float("-inf"))
        out.append(torch.logsumexp(s, dim=-1))
    return out


def assert_same_precision_rule(q, k, v, o, lse, causal, scale, what):
    """FlashAttention-2's rule for a bf16/fp16 step on 16-bit q, k, v (see the module's help)."""
    assert o.dtype in (q.dtype, torch.float32) and lse.dtype == torch.float32, f"{what}: {o.dtype}, {lse.dtype}"
    with sdpa_kernel(SDPBackend.MATH):
        o64 = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, scale=scale)
        o16 = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    floor = UNIT_ROUNDOFF[q.dtype] * max(1.0, o64.abs().max().item())
    err = (o.double() - o64).abs().max().item()
    yardstick = (o16.double() - o64).abs().max().item()
    assert torch.isfinite(o).all() and torch.isfinite(lse).all(), f"{what}: non-finite output"
    assert err <= 2 * yardstick + floor, (
        f"{what}: max |O - O_ref| {err:.3g} > 2 x SDPA {q.dtype}'s {yardstick:.3g} + {floor:.3g}")
    lse64, lse32 = lse_fp64_and_fp32(q, k, v, causal, scale)
    err_lse = (lse.double() - lse64).abs().max().item()
    bound_lse = 2 * (lse32.double() - lse64).abs().max().item() + 1e-5 * max(1.0, lse64.abs().max().item())
    assert err_lse <= bound_lse, f"{what}: max |L - L_ref| {err_lse:.3g} > {bound_lse:.3g}"


def assert_matches_sdpa(q, k, v, o, lse, causal, scale, what):
    if q.dtype != torch.float32:
        return assert_same_precision_rule(q, k, v, o, lse, causal, scale, what)
    o64, lse64, o32 = sdpa_reference(q, k, v, causal, scale)
    err = (o.double() - o64).abs().max().item()
    yardstick = (o32.double() - o64).abs().max().item()
    assert err <= 2 * yardstick + 1e-5, f"{what}: max |O - O_ref| {err:.3g} > 2 x SDPA fp32's {yardstick:.3g} + 1e-5"
    err_lse = (lse.double() - lse64).abs().max().item()
    assert err_lse <= 1e-5 * max(1.0, lse64.abs().max().item()), f"{what}: max |L - L_ref| {err_lse:.3g}"
    verdict = flash_steps.check_result(*(x.cpu().numpy() for x in (q, k, v, o, lse)), causal=causal, scale=scale)
    assert verdict.passed, f"{what}: {verdict!r}"


SHAPE_ID = lambda c: "B{}H{}_Nq{}_Nkv{}_d{}{}".format(*c[:5], "_causal" * c[5])  # noqa: E731


@pytest.mark.parametrize("step", FP32_STEPS, ids=lambda s: s.name)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_ID)
def test_gpu_step_matches_sdpa(step, shape):
    b, h, n_q, n_kv, d, causal, scale = shape
    q, k, v = make_qkv(b, h, n_q, n_kv, d)
    o, lse = step.attention_forward(q, k, v, causal=causal, scale=scale)
    assert isinstance(o, torch.Tensor) and isinstance(lse, torch.Tensor)
    assert o.shape == q.shape and lse.shape == q.shape[:3]
    assert o.dtype == lse.dtype == torch.float32 and o.device == q.device and o.is_contiguous()
    torch.cuda.synchronize()
    assert_matches_sdpa(q, k, v, o, lse, causal, scale, step.name)


@pytest.mark.parametrize("case", HALF_CASES, ids=lambda c: f"{c[0].name}-{c[1]}")
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_ID)
def test_half_precision_step_matches_sdpa_by_the_same_precision_rule(case, shape):
    step, dtype = case
    b, h, n_q, n_kv, d, causal, scale = shape
    if step.head_dims and d not in step.head_dims:
        pytest.skip(f"{step.name} is not compiled for d = {d}")
    q, k, v = make_qkv(b, h, n_q, n_kv, d, dtype=getattr(torch, dtype))
    o, lse = step.attention_forward(q, k, v, causal=causal, scale=scale)
    assert o.dtype == q.dtype and lse.dtype == torch.float32  # O in the inputs' dtype, L in fp32
    assert o.shape == q.shape and lse.shape == q.shape[:3] and o.device == q.device and o.is_contiguous()
    torch.cuda.synchronize()
    assert_same_precision_rule(q, k, v, o, lse, causal, scale, f"{step.name} {dtype}")


@pytest.mark.parametrize("case", HALF_CASES, ids=lambda c: f"{c[0].name}-{c[1]}")
def test_half_precision_is_deterministic_and_scores_of_1e3_do_not_overflow(case):
    step, dtype = case
    q, k, v = make_qkv(2, 2, 200, 300, 64, seed=3, dtype=getattr(torch, dtype))
    q, k = q * 30, k * 30  # |s| ~ 1e3 at scale 1/8: still finite in fp16 (inputs <= ~150)
    o1, lse1 = step.attention_forward(q, k, v, causal=True)
    o2, lse2 = step.attention_forward(q, k, v, causal=True)
    assert torch.equal(o1, o2) and torch.equal(lse1, lse2)  # bitwise the same, run after run
    assert_same_precision_rule(q, k, v, o1, lse1, True, None, f"{step.name} {dtype} large scores")


@pytest.mark.parametrize("step", GPU_STEPS, ids=lambda s: s.name)
def test_numpy_arrays_go_through_the_steps_session(step):
    q, k, v = (x.cpu().numpy() for x in make_qkv(1, 2, 65, 129, 64))
    o, lse = step.attention_forward(q, k, v, causal=True)  # the step's own precision
    assert isinstance(o, np.ndarray) and o.dtype == lse.dtype == np.float32  # float32 in and out
    if "float32" in step.dtypes:
        assert flash_steps.check_result(q, k, v, o, lse, causal=True).passed
    for dtype in step.precisions:
        if dtype == "fp32":
            continue
        # Rounded once on upload, as .to(dtype) rounds: judged on those very inputs.
        o, lse = step.attention_forward(q, k, v, causal=True, dtype=dtype)
        t = getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[dtype])
        q16, k16, v16 = (torch.from_numpy(x).to(DEVICE).to(t) for x in (q, k, v))
        assert_same_precision_rule(q16, k16, v16, torch.from_numpy(o).to(DEVICE), torch.from_numpy(lse).to(DEVICE),
                                   True, None, f"{step.name} from NumPy in {dtype}")
    if "fp32" not in step.precisions:
        with pytest.raises(ValueError, match=rf"^{step.name} computes in bf16, fp16; --dtype fp32 is not one"):
            step.attention_forward(q, k, v, dtype="fp32")


@pytest.mark.parametrize("step", GPU_STEPS, ids=lambda s: s.name)
def test_the_kernel_runs_on_the_callers_current_stream(step):
    # Q is written on a side stream after a long sleep, O is read on it right after the
    # call. Only a kernel that was ordered on that stream (or made to wait for it, by
    # __dlpack__(stream=...)) sees Q written and finishes before O is read; PyTorch's
    # side streams do not synchronise with the default stream.
    q, k, v = make_qkv(2, 4, 512, 512, 64, dtype=own_dtype(step))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time on this stream
        q_late = q * 1.0
        o, lse = step.attention_forward(q_late, k, v, causal=True, check_finite=False)
        o_read = o.clone()
    side.synchronize()
    assert_matches_sdpa(q, k, v, o_read, lse, True, None, step.name)


@pytest.mark.parametrize("step", GPU_STEPS, ids=lambda s: s.name)
def test_launch_writes_in_place_without_a_copy(step):
    q, k, v = make_qkv(1, 2, 100, 100, 64, dtype=own_dtype(step))
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device=DEVICE)
    shape = step.check_inputs(q, k, v)
    assert (shape.batch, shape.heads, shape.seq_q, shape.seq_kv, shape.head_dim) == (1, 2, 100, 100, 64)
    nbytes = step.workspace_bytes(shape, causal=True)
    workspace = torch.empty(nbytes, dtype=torch.uint8, device=DEVICE) if nbytes else None
    data_ptr = o.data_ptr()
    step.launch(q, k, v, o, lse, workspace, causal=True, stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert o.data_ptr() == data_ptr and not o.isnan().any() and not lse.isnan().any()
    assert_matches_sdpa(q, k, v, o, lse, True, None, step.name)


def test_another_frameworks_tensors_get_module_owned_outputs_through_dlpack():
    # A framework the package cannot allocate with: outputs are DeviceArrays the
    # caller's from_dlpack takes (here no from_dlpack is known, so they come back as
    # they are, and PyTorch takes them).
    class Foreign:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None, **kwargs):
            return self.t.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    step = GPU_STEPS[-1]
    q, k, v = make_qkv(1, 2, 77, 99, 64, dtype=own_dtype(step))
    o, lse = step.attention_forward(Foreign(q), Foreign(k), Foreign(v), causal=True)
    assert isinstance(o, flash_steps._native.DeviceArray) and o.shape == (1, 2, 77, 64)
    assert o.dtype == step.dtypes[0] and lse.dtype == "float32"
    o_t, lse_t = torch.from_dlpack(o), torch.from_dlpack(lse)
    assert o_t.shape == q.shape and o_t.device == q.device and o_t.dtype == q.dtype
    del o, lse  # the tensors keep the memory alive
    assert_matches_sdpa(q, k, v, o_t, lse_t, True, None, "DeviceArray")


@pytest.mark.parametrize("step", GPU_STEPS, ids=lambda s: s.name)
def test_the_operator_and_the_sdpa_function_agree_with_sdpa(step):
    q, k, v = make_qkv(2, 4, 200, 300, 64, dtype=own_dtype(step))
    op = getattr(torch.ops.flash_steps, step.name)
    o, lse = op(q, k, v, False, 0.125)
    assert_matches_sdpa(q, k, v, o, lse, False, 0.125, f"torch.ops.flash_steps.{step.name}")
    # Views in the [B, N, H, d] layout of attention layers are made contiguous by the operator.
    q_view = q.transpose(1, 2).contiguous().transpose(1, 2)
    assert not q_view.is_contiguous()
    o_view = fsp.scaled_dot_product_attention(q_view, k, v, step=step.name)
    torch.testing.assert_close(o_view, fsp.scaled_dot_product_attention(q, k, v, step=step.name), rtol=0, atol=0)
    # Grouped-query attention: 4 query heads share 2 key/value heads.
    o_gqa = fsp.scaled_dot_product_attention(q, k[:, :2], v[:, :2], is_causal=True, enable_gqa=True, step=step.name)
    if q.dtype == torch.float32:
        with sdpa_kernel(SDPBackend.MATH):
            expected = F.scaled_dot_product_attention(q, k[:, :2], v[:, :2], is_causal=True, enable_gqa=True)
        torch.testing.assert_close(o_gqa, expected, rtol=0, atol=2e-5)
    else:  # the same as the step on K and V repeated to 4 heads, bit for bit
        o_rep, _ = op(q, k[:, :2].repeat_interleave(2, dim=1), v[:, :2].repeat_interleave(2, dim=1), True, None)
        torch.testing.assert_close(o_gqa, o_rep, rtol=0, atol=0)
    # Inputs that require grad are read all the same (the operator is forward-only).
    o_grad, _ = op(q.requires_grad_(), k, v, False, 0.125)
    torch.testing.assert_close(o_grad.detach(), o, rtol=0, atol=0)


def test_the_sdpa_function_refuses_masks_and_dropout():
    q, k, v = make_qkv(1, 1, 8, 8, 64, dtype=own_dtype(GPU_STEPS[-1]))
    with pytest.raises(ValueError, match="attn_mask is not supported"):
        fsp.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(8, 8, dtype=torch.bool, device=DEVICE))
    with pytest.raises(ValueError, match="dropout_p must be 0"):
        fsp.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="runs on the CPU"):
        fsp.op("step02")


@pytest.mark.parametrize("step", GPU_STEPS, ids=lambda s: s.name)
def test_bad_tensors_are_refused_with_the_steps_message(step):
    q, k, v = make_qkv(1, 2, 40, 50, 64, dtype=own_dtype(step))
    if step.dtypes == ["float32"]:
        with pytest.raises(TypeError, match=rf"^q must be float32 \({step.name} takes float32\); got float16$"):
            step.attention_forward(q.half(), k.half(), v.half())
        with pytest.raises(TypeError, match=rf"^k is bfloat16 but q is float32; q, k and v must share one dtype "
                                            rf"\({step.name} takes float32\)$"):
            step.attention_forward(q, k.bfloat16(), v)
    else:
        takes = ", ".join(step.dtypes)
        with pytest.raises(TypeError, match=rf"^q must be {' or '.join(step.dtypes)} \({step.name} takes {takes}\); "
                                            rf"got float32$"):
            step.attention_forward(q.float(), k.float(), v.float())
        other = torch.float16 if q.dtype == torch.bfloat16 else torch.bfloat16
        with pytest.raises(TypeError, match=rf"^v is {str(other)[6:]} but q is {step.dtypes[0]}; q, k and v must "
                                            rf"share one dtype \({step.name} takes {takes}\)$"):
            step.attention_forward(q, k, v.to(other))
        with pytest.raises(TypeError, match=r"^dtype='fp16' but q is bfloat16; CUDA tensors compute in their own"):
            step.attention_forward(q, k, v, dtype="fp16")
    with pytest.raises(ValueError, match=r"^q is in CPU memory; a GPU step takes CUDA tensors"):
        step.attention_forward(q.cpu(), k, v)
    with pytest.raises(ValueError, match="^q is not contiguous"):
        step.attention_forward(q.transpose(2, 3).contiguous().transpose(2, 3), k, v)
    flat = torch.randn(q.numel() + 1, device=DEVICE).to(q.dtype)  # one element in: 2 or 4 bytes off
    with pytest.raises(ValueError, match="16-byte boundary"):
        step.attention_forward(flat[1:].view(q.shape), k, v)
    with pytest.raises(ValueError, match=r"^k and v must have the same shape"):
        step.attention_forward(q, k, v[:, :, :49])
    with pytest.raises(ValueError, match=r"^q and k must agree in B, H and d"):
        step.attention_forward(q, k[:, :1], v[:, :1])
    with pytest.raises(ValueError, match=r"^q: expected 4 dimensions"):
        step.attention_forward(q[0], k, v)
    with pytest.raises(ValueError, match=rf"^{step.name} does not support head_dim 48 \(supported:"):
        step.attention_forward(*(x[..., :48].contiguous() for x in (q, k, v)))
    with pytest.raises(ValueError, match=r"^seq_kv must be >= 1 \(got 0\)$"):
        step.attention_forward(q, k[:, :, :0], v[:, :, :0])
    bad = q.clone()
    bad[0, 1, 7, 3] = float("inf")
    with pytest.raises(ValueError, match=r"^q holds inf at \[b=0, h=1, n=7, c=3\]; inputs must be finite numbers$"):
        step.attention_forward(bad, k, v, check_finite=True)
    step.attention_forward(bad, k, v)  # the default, as SDPA's: no scan, no wait, inf in, NaN out
    with pytest.raises(ValueError, match="scale must be a finite number"):
        step.attention_forward(q, k, v, scale=float("nan"))
    with pytest.raises(ValueError, match="stream must be a CUDA stream handle"):
        step.attention_forward(q, k, v, stream=-5)
    # launch's own checks: outputs of the wrong shape, aliasing an input, a missing workspace.
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device=DEVICE)
    scratch = torch.empty(1 << 20, dtype=torch.uint8, device=DEVICE)
    wrong = torch.float32 if q.dtype != torch.float32 else torch.float16
    with pytest.raises(TypeError, match=r"^o must be .* \(O has the inputs' dtype\); got "):
        step.launch(q, k, v, o.to(wrong), lse, scratch)
    with pytest.raises(TypeError, match=r"^lse must be float32 \(L is fp32 in every precision\); got "):
        step.launch(q, k, v, o, lse.to(q.dtype if q.dtype != torch.float32 else torch.float16), scratch)
    with pytest.raises(ValueError, match=r"^o must have shape \[1, 2, 40, 64\]"):
        step.launch(q, k, v, o[:, :1], lse, torch.empty(1 << 20, dtype=torch.uint8, device=DEVICE))
    with pytest.raises(ValueError, match="^o shares memory with q"):
        step.launch(q, k, v, q, lse, torch.empty(1 << 20, dtype=torch.uint8, device=DEVICE))
    nbytes = step.workspace_bytes(step.check_inputs(q, k, v), causal=True)  # step 24 needs one only when causal
    if nbytes:
        with pytest.raises(ValueError, match="needs a workspace of"):
            step.launch(q, k, v, o, lse, causal=True)
        with pytest.raises(ValueError, match="workspace must hold at least"):
            step.launch(q, k, v, o, lse, torch.empty(nbytes - 1, dtype=torch.uint8, device=DEVICE), causal=True)
    # After all of that the GPU is still usable: nothing was launched on bad input.
    o, lse = step.attention_forward(q, k, v, causal=True)
    torch.cuda.synchronize()
    assert_matches_sdpa(q, k, v, o, lse, True, None, step.name)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_on_two_gpus_are_refused():
    q, k, v = make_qkv(1, 1, 16, 16, 64, dtype=own_dtype(GPU_STEPS[-1]))
    with pytest.raises(ValueError, match=r"^k is on cuda:1 but q is on cuda:0"):
        GPU_STEPS[-1].attention_forward(q, k.to("cuda:1"), v)


@pytest.mark.parametrize("step", GPU_STEPS, ids=lambda s: s.name)
def test_the_operator_is_captured_in_a_cuda_graph_and_replays_bitwise_as_eager(step):
    # The operator only allocates through PyTorch and enqueues on the current stream (no scan,
    # no wait, no device query that capture refuses): captured once, replayed on new inputs
    # written into the same memory, it gives what an eager call gives on them, bit for bit.
    q, k, v = make_qkv(2, 3, 300, 257, 64, seed=11, dtype=own_dtype(step))
    op = getattr(torch.ops.flash_steps, step.name)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up outside the capture (allocator, lazy initialisation, tensor maps)
            op(q, k, v, True, None)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o_graph, lse_graph = op(q, k, v, True, None)
    new_q, new_k, new_v = make_qkv(2, 3, 300, 257, 64, seed=12, dtype=q.dtype)
    for t, new in zip((q, k, v), (new_q, new_k, new_v)):
        t.copy_(new)  # new inputs in the captured memory
    graph.replay()
    torch.cuda.synchronize()
    o_eager, lse_eager = op(q, k, v, True, None)
    torch.cuda.synchronize()
    assert torch.equal(o_graph, o_eager) and torch.equal(lse_graph, lse_eager)
    assert_matches_sdpa(q, k, v, o_graph, lse_graph, True, None, f"{step.name} replayed")


@pytest.mark.parametrize("step", GPU_STEPS, ids=lambda s: s.name)
def test_an_eager_call_skips_the_operator_gives_its_bits_and_is_captured_in_a_cuda_graph(step, monkeypatch):
    # attention() and scaled_dot_product_attention() run the step directly when nothing needs
    # the operator (no gradient to record, no tracing): the operator's body without its
    # dispatch, so the same kernel and the same bits, still capturable in a CUDA graph.
    q, k, v = make_qkv(2, 3, 300, 257, 64, seed=13, dtype=own_dtype(step))
    o_op, lse_op = getattr(torch.ops.flash_steps, step.name)(q, k, v, True, None)

    def refuse(*args):
        raise AssertionError(f"{step.name}'s operator was called")

    monkeypatch.setitem(fsp.OPS, step.name, refuse)
    o, lse = fsp.attention(q, k, v, True, step=step.name)
    assert torch.equal(o, o_op) and torch.equal(lse, lse_op)
    assert torch.equal(fsp.scaled_dot_product_attention(q, k, v, is_causal=True, step=step.name), o_op)
    with torch.no_grad():  # inputs that require grad, but no graph is recorded
        assert torch.equal(fsp.attention(q.clone().requires_grad_(), k, v, True, step=step.name)[0], o_op)
    with pytest.raises(AssertionError, match="operator was called"):  # a gradient to record: the operator
        fsp.attention(q.clone().requires_grad_(), k, v, True, step=step.name)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fsp.attention(q, k, v, True, step=step.name)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o_graph, lse_graph = fsp.attention(q, k, v, True, step=step.name)
    new_q = make_qkv(2, 3, 300, 257, 64, seed=14, dtype=q.dtype)[0]
    q.copy_(new_q)
    graph.replay()
    o_eager, lse_eager = fsp.attention(q, k, v, True, step=step.name)
    torch.cuda.synchronize()
    assert torch.equal(o_graph, o_eager) and torch.equal(lse_graph, lse_eager)
    assert_matches_sdpa(q, k, v, o_graph, lse_graph, True, None, f"{step.name} eager path replayed")


def test_without_a_step_the_fastest_step_for_the_dtype_and_d_runs():
    forward_steps = [s for s in GPU_STEPS if not s.extends]
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for d in (32, 64, 96, 128):
            takes = [s for s in forward_steps
                     if str(dtype)[6:] in s.dtypes and (not s.head_dims or d in s.head_dims)]
            if not takes:
                continue
            q, k, v = make_qkv(1, 2, 70, 90, d, dtype=dtype)
            assert fsp.default_step(q) == takes[-1].name, (dtype, d)
            o = fsp.scaled_dot_product_attention(q, k, v, is_causal=True)  # float32 too: no TypeError
            expected, _ = getattr(torch.ops.flash_steps, takes[-1].name)(q, k, v, True, None)
            assert torch.equal(o, expected), (dtype, d)


def test_attention_forward_does_not_wait_by_default_and_host_phases_can_be_timed():
    step = flash_steps.step(fsp.DEFAULT_STEP)
    q, k, v = make_qkv(1, 1, 128, 128, 64, dtype=own_dtype(step))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time ahead of the call on this stream
        step.attention_forward(q, k, v)
        # Not waited for: the call came back while the stream still sleeps.
        assert not side.query()
    side.synchronize()
    flash_steps._native.host_times()  # starts the totals from zero
    flash_steps._native.host_timing(True)
    try:
        for _ in range(3):
            step.attention_forward(q, k, v)
    finally:
        flash_steps._native.host_timing(False)
    phases = flash_steps._native.host_times()
    # A step with a workspace (step 24's tile counter) sized it from q, k, v's shapes in the
    # first call above, and asks no more for the same shapes: one borrow of q, k, v a call.
    borrows = 3
    for phase, expected in (("borrow and check q, k, v", borrows), ("borrow and check o, lse, workspace", 3),
                            ("step launch (tensor maps, attribute, <<<>>>)", 3), ("shared-memory attribute", 3)):
        calls, microseconds = phases[phase]
        assert calls == expected and microseconds > 0, (phase, phases)
    assert flash_steps._native.host_times() == {}
