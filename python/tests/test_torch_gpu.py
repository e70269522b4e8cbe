"""The GPU steps on PyTorch CUDA tensors: against SDPA, on the caller's stream, through
DLPack without a copy, and every bad input refused with the steps' one-line message.

Run by ctest through run.py, which reports the file skipped without torch or a GPU.

Tolerance, as scripts/check_pytorch.py states it: with float64 SDPA (math backend) as
the reference, a step's max error must be at most twice that of PyTorch's own float32
SDPA (math backend, TF32 off) on the same inputs, plus 1e-5; and the C++ tests' rule
(flash_steps.check_result: twice fp32 standard attention's error + 1e-6) on the same
numbers.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flash_steps
import flash_steps.pytorch as fsp

GPU_STEPS = flash_steps.gpu_steps()
DEVICE = "cuda"

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


def make_qkv(b, h, n_q, n_kv, d, seed=0):
    gen = torch.Generator(DEVICE).manual_seed(seed)
    q = torch.randn(b, h, n_q, d, device=DEVICE, generator=gen)
    k = torch.randn(b, h, n_kv, d, device=DEVICE, generator=gen)
    v = torch.randn(b, h, n_kv, d, device=DEVICE, generator=gen)
    return q, k, v


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


def assert_matches_sdpa(q, k, v, o, lse, causal, scale, what):
    o64, lse64, o32 = sdpa_reference(q, k, v, causal, scale)
    err = (o.double() - o64).abs().max().item()
    yardstick = (o32.double() - o64).abs().max().item()
    assert err <= 2 * yardstick + 1e-5, f"{what}: max |O - O_ref| {err:.3g} > 2 x SDPA fp32's {yardstick:.3g} + 1e-5"
    err_lse = (lse.double() - lse64).abs().max().item()
    assert err_lse <= 1e-5 * max(1.0, lse64.abs().max().item()), f"{what}: max |L - L_ref| {err_lse:.3g}"
    verdict = flash_steps.check_result(*(x.cpu().numpy() for x in (q, k, v, o, lse)), causal=causal, scale=scale)
    assert verdict.passed, f"{what}: {verdict!r}"


@pytest.mark.parametrize("step", GPU_STEPS, ids=lambda s: s.name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda c: "B{}H{}_Nq{}_Nkv{}_d{}{}".format(*c[:5], "_causal" * c[5]))
def test_gpu_step_matches_sdpa(step, shape):
    b, h, n_q, n_kv, d, causal, scale = shape
    q, k, v = make_qkv(b, h, n_q, n_kv, d)
    o, lse = step.attention_forward(q, k, v, causal=causal, scale=scale)
    assert isinstance(o, torch.Tensor) and isinstance(lse, torch.Tensor)
    assert o.shape == q.shape and lse.shape == q.shape[:3]
    assert o.dtype == lse.dtype == torch.float32 and o.device == q.device and o.is_contiguous()
    torch.cuda.synchronize()
    assert_matches_sdpa(q, k, v, o, lse, causal, scale, step.name)


@pytest.mark.parametrize("step", GPU_STEPS, ids=lambda s: s.name)
def test_numpy_arrays_go_through_the_steps_session(step):
    q, k, v = (x.cpu().numpy() for x in make_qkv(1, 2, 65, 129, 64))
    o, lse = step.attention_forward(q, k, v, causal=True)
    assert isinstance(o, np.ndarray)
    assert flash_steps.check_result(q, k, v, o, lse, causal=True).passed


@pytest.mark.parametrize("step", GPU_STEPS, ids=lambda s: s.name)
def test_the_kernel_runs_on_the_callers_current_stream(step):
    # Q is written on a side stream after a long sleep, O is read on it right after the
    # call. Only a kernel that was ordered on that stream (or made to wait for it, by
    # __dlpack__(stream=...)) sees Q written and finishes before O is read; PyTorch's
    # side streams do not synchronise with the default stream.
    q, k, v = make_qkv(2, 4, 512, 512, 64)
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
    q, k, v = make_qkv(1, 2, 100, 100, 64)
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device=DEVICE)
    shape = step.check_inputs(q, k, v)
    assert (shape.batch, shape.heads, shape.seq_q, shape.seq_kv, shape.head_dim) == (1, 2, 100, 100, 64)
    nbytes = step.workspace_bytes(shape)
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
    q, k, v = make_qkv(1, 2, 77, 99, 64)
    o, lse = step.attention_forward(Foreign(q), Foreign(k), Foreign(v), causal=True)
    assert isinstance(o, flash_steps._native.DeviceArray) and o.shape == (1, 2, 77, 64)
    o_t, lse_t = torch.from_dlpack(o), torch.from_dlpack(lse)
    assert o_t.shape == q.shape and o_t.device == q.device
    del o, lse  # the tensors keep the memory alive
    assert_matches_sdpa(q, k, v, o_t, lse_t, True, None, "DeviceArray")


@pytest.mark.parametrize("step", GPU_STEPS, ids=lambda s: s.name)
def test_the_operator_and_the_sdpa_function_agree_with_sdpa(step):
    q, k, v = make_qkv(2, 4, 200, 300, 64)
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
    with sdpa_kernel(SDPBackend.MATH):
        expected = F.scaled_dot_product_attention(q, k[:, :2], v[:, :2], is_causal=True, enable_gqa=True)
    torch.testing.assert_close(o_gqa, expected, rtol=0, atol=2e-5)
    # Inputs that require grad are read all the same (the operator is forward-only).
    o_grad, _ = op(q.requires_grad_(), k, v, False, 0.125)
    torch.testing.assert_close(o_grad.detach(), o, rtol=0, atol=0)


def test_the_sdpa_function_refuses_masks_and_dropout():
    q, k, v = make_qkv(1, 1, 8, 8, 64)
    with pytest.raises(ValueError, match="attn_mask is not supported"):
        fsp.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(8, 8, dtype=torch.bool, device=DEVICE))
    with pytest.raises(ValueError, match="dropout_p must be 0"):
        fsp.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="runs on the CPU"):
        fsp.op("step02")


@pytest.mark.parametrize("step", GPU_STEPS, ids=lambda s: s.name)
def test_bad_tensors_are_refused_with_the_steps_message(step):
    q, k, v = make_qkv(1, 2, 40, 50, 64)
    with pytest.raises(TypeError, match=rf"^q must be float32 \({step.name} takes float32\); got float16$"):
        step.attention_forward(q.half(), k, v)
    with pytest.raises(TypeError, match="k must be float32 .* got bfloat16"):
        step.attention_forward(q, k.bfloat16(), v)
    with pytest.raises(ValueError, match=r"^q is in CPU memory; a GPU step takes CUDA tensors"):
        step.attention_forward(q.cpu(), k, v)
    with pytest.raises(ValueError, match="^q is not contiguous"):
        step.attention_forward(q.transpose(2, 3).contiguous().transpose(2, 3), k, v)
    flat = torch.randn(q.numel() + 1, device=DEVICE)
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
        step.attention_forward(bad, k, v)
    step.attention_forward(bad, k, v, check_finite=False)  # the caller's choice: no wait, inf in, NaN out
    with pytest.raises(ValueError, match="scale must be a finite number"):
        step.attention_forward(q, k, v, scale=float("nan"))
    with pytest.raises(ValueError, match="stream must be a CUDA stream handle"):
        step.attention_forward(q, k, v, stream=-5)
    # launch's own checks: outputs of the wrong shape, aliasing an input, a missing workspace.
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device=DEVICE)
    with pytest.raises(ValueError, match=r"^o must have shape \[1, 2, 40, 64\]"):
        step.launch(q, k, v, o[:, :1], lse, torch.empty(1 << 20, dtype=torch.uint8, device=DEVICE))
    with pytest.raises(ValueError, match="^o shares memory with q"):
        step.launch(q, k, v, q, lse, torch.empty(1 << 20, dtype=torch.uint8, device=DEVICE))
    if step.workspace_bytes(step.check_inputs(q, k, v)):
        with pytest.raises(ValueError, match="needs a workspace of"):
            step.launch(q, k, v, o, lse)
        with pytest.raises(ValueError, match="workspace must hold at least"):
            step.launch(q, k, v, o, lse, torch.empty(4, dtype=torch.uint8, device=DEVICE))
    # After all of that the GPU is still usable: nothing was launched on bad input.
    o, lse = step.attention_forward(q, k, v, causal=True)
    torch.cuda.synchronize()
    assert_matches_sdpa(q, k, v, o, lse, True, None, step.name)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_on_two_gpus_are_refused():
    q, k, v = make_qkv(1, 1, 16, 16, 64)
    with pytest.raises(ValueError, match=r"^k is on cuda:1 but q is on cuda:0"):
        GPU_STEPS[-1].attention_forward(q, k.to("cuda:1"), v)
