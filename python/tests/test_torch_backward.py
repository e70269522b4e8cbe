"""Gradients through the GPU steps' PyTorch operators: against SDPA's and the fp64
reference, opcheck with gradients, torch.compile(fullgraph=True) of a training step, and
CUDA graph capture of forward + backward.

Run by ctest through run.py, which reports the file skipped without torch or a GPU.

Tolerance, the gradient rule of the C++ tests said in PyTorch's terms: with float64 SDPA
(math backend) as the reference, a step's max error on each of dQ, dK and dV must be at
most twice that of PyTorch's own float32 SDPA gradients (math backend, TF32 off) on the
same inputs, plus 1e-5 x max(1, max |gradient|); and flash_steps.check_gradients (the C++
rule itself: twice fp32 standard attention's error + its floor) on the same numbers.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flash_steps
import flash_steps.pytorch as fsp

_CC = 10 * torch.cuda.get_device_capability()[0] + torch.cuda.get_device_capability()[1] if torch.cuda.is_available() else 0
GPU_STEPS = [s for s in flash_steps.gpu_steps() if s.compute_capability in (0, _CC)]
BACKWARD_STEPS = [s for s in GPU_STEPS if s.has_backward]
# The tests on float32 tensors, judged beside SDPA's float32 gradients; the 16-bit steps (step 27)
# are judged in their own precision by test_16bit_gradients_pass_the_rule_in_their_precision.
FP32_BACKWARD_STEPS = [s for s in BACKWARD_STEPS if "float32" in s.dtypes]
SIXTEEN_BIT_BACKWARD_STEPS = [s for s in BACKWARD_STEPS if "float32" not in s.dtypes]
FORWARD_ONLY = [s for s in GPU_STEPS if not s.has_backward]
DEVICE = "cuda"

# The forward tests' shapes: (B, H, N_q, N_kv, d, causal, scale or None).
from test_torch_gpu import SHAPES  # noqa: E402


def shape_id(shape):
    b, h, n_q, n_kv, d, causal, scale = shape
    return f"B{b}H{h}_Nq{n_q}_Nkv{n_kv}_d{d}{'_causal' if causal else ''}" + ("" if scale is None else f"_s{scale}")


@pytest.fixture(autouse=True)
def exact_float32():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def test_there_is_a_gpu_step_with_a_backward():
    assert BACKWARD_STEPS, "step29_backward_deterministic runs on every GPU the build targets"
    assert fsp.DEFAULT_BACKWARD_STEP == BACKWARD_STEPS[-1].name
    assert not flash_steps.step(fsp.DEFAULT_STEP).extends  # the forward default is a forward step


def make_inputs(b, h, n_q, n_kv, d, seed=0, dtype=torch.float32):
    gen = torch.Generator(DEVICE).manual_seed(seed)
    q = torch.randn(b, h, n_q, d, device=DEVICE, generator=gen)
    k = torch.randn(b, h, n_kv, d, device=DEVICE, generator=gen)
    v = torch.randn(b, h, n_kv, d, device=DEVICE, generator=gen)
    d_o = torch.randn(b, h, n_q, d, device=DEVICE, generator=gen)
    return [t.to(dtype) for t in (q, k, v)], d_o.to(dtype)


def sdpa_gradients(q, k, v, d_o, causal, scale, dtype):
    """dQ, dK, dV of SDPA's math backend in `dtype` for upstream gradient d_o."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)
    return torch.autograd.grad(o, leaves, d_o.to(dtype))


def step_gradients(step, q, k, v, d_o, causal, scale):
    """dQ, dK, dV through the step's operator and autograd, and its O and L."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    o, lse = fsp.attention(*leaves, causal, scale, step=step.name)
    grads = torch.autograd.grad(o, leaves, d_o)
    return grads, o.detach(), lse


def assert_gradients_match(q, k, v, d_o, grads, causal, scale, what):
    grads64 = sdpa_gradients(q, k, v, d_o, causal, scale, torch.float64)
    grads32 = sdpa_gradients(q, k, v, d_o, causal, scale, torch.float32)
    for name, g, g64, g32 in zip(("dQ", "dK", "dV"), grads, grads64, grads32):
        assert g.dtype == q.dtype and g.shape == g64.shape, f"{what}: {name} {g.dtype} {tuple(g.shape)}"
        assert torch.isfinite(g).all(), f"{what}: {name} not finite"
        err = (g.double() - g64).abs().max().item()
        yardstick = (g32.double() - g64).abs().max().item()
        floor = 1e-5 * max(1.0, g64.abs().max().item())
        assert err <= 2 * yardstick + floor, (
            f"{what}: max |{name} - {name}_ref| {err:.3g} > 2 x SDPA fp32's {yardstick:.3g} + {floor:.3g}")
    # The C++ tests' rule, on the same numbers.
    numpy = [t.detach().cpu().numpy() for t in (q, k, v, d_o, *grads)]
    verdict = flash_steps.check_gradients(*numpy, causal=causal, scale=scale)
    assert verdict.passed, f"{what}: {verdict!r}"


@pytest.mark.parametrize("step", FP32_BACKWARD_STEPS, ids=lambda s: s.name)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_gradients_match_sdpa_and_the_fp64_reference(step, shape):
    b, h, n_q, n_kv, d, causal, scale = shape
    (q, k, v), d_o = make_inputs(b, h, n_q, n_kv, d)
    grads, _, lse = step_gradients(step, q, k, v, d_o, causal, scale)
    assert not lse.requires_grad  # L carries no gradient: marked non-differentiable
    assert_gradients_match(q, k, v, d_o, grads, causal, scale, f"{step.name} {shape_id(shape)}")


@pytest.mark.parametrize("step", FP32_BACKWARD_STEPS, ids=lambda s: s.name)
def test_loss_backward_through_a_transposed_layout(step):
    # As an attention layer calls it: [B, N, H, d] projections transposed to [B, H, N, d]
    # (views, copied by the operator), loss.backward() filling .grad of the leaves.
    (q, k, v), d_o = make_inputs(2, 4, 100, 100, 64, seed=1)
    leaves = [t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v)]  # [B, N, H, d]
    o, _ = fsp.attention(*(t.transpose(1, 2) for t in leaves), True, step=step.name)
    (o * d_o).sum().backward()
    grads = [t.grad.transpose(1, 2) for t in leaves]
    assert_gradients_match(q, k, v, d_o, grads, True, None, f"{step.name} transposed")


@pytest.mark.parametrize("step", [s for s in FP32_BACKWARD_STEPS if s.has_deterministic_option],
                         ids=lambda s: s.name)
def test_deterministic_algorithms_give_bitwise_repeatable_gradients(step):
    (q, k, v), d_o = make_inputs(2, 4, 300, 300, 64, seed=2)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        first, _, _ = step_gradients(step, q, k, v, d_o, True, None)
        second, _, _ = step_gradients(step, q, k, v, d_o, True, None)
    finally:
        torch.use_deterministic_algorithms(previous)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    assert_gradients_match(q, k, v, d_o, first, True, None, f"{step.name} deterministic")


@pytest.mark.parametrize("step", [s for s in FP32_BACKWARD_STEPS if s.has_deterministic_option],
                         ids=lambda s: s.name)
def test_attention_backward_on_tensors_and_numpy_agree(step):
    # Step.attention_backward on CUDA tensors (launch_backward, no copy) and on NumPy
    # arrays (the backward session) compute the same gradients: deterministic, bitwise.
    (q, k, v), d_o = make_inputs(1, 2, 77, 130, 32, seed=3)
    o, lse = step.attention_forward(q, k, v, causal=True)
    on_gpu = step.attention_backward(q, k, v, o, lse, d_o, causal=True, deterministic=True)
    numpy = [t.cpu().numpy() for t in (q, k, v, o, lse, d_o)]
    on_host = step.attention_backward(*numpy, causal=True, deterministic=True)
    for a, b in zip(on_gpu, on_host):
        assert a.is_cuda and a.dtype == torch.float32
        np.testing.assert_array_equal(a.cpu().numpy(), b)
    assert flash_steps.check_gradients(*numpy[:3], numpy[5], *on_host, causal=True)


@pytest.mark.parametrize("step", FP32_BACKWARD_STEPS, ids=lambda s: s.name)
def test_launch_backward_refuses_bad_tensors(step):
    (q, k, v), d_o = make_inputs(1, 2, 40, 24, 64, seed=4)
    o, lse = step.attention_forward(q, k, v)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    shape = step.check_inputs(q, k, v)
    nbytes = step.backward_workspace_bytes(shape)
    workspace = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=DEVICE)
    args = dict(q=q, k=k, v=v, o=o, lse=lse, d_o=d_o, dq=dq, dk=dk, dv=dv, workspace=workspace)

    def launch(**changes):
        call = {**args, **changes}
        step.launch_backward(call.pop("q"), call.pop("k"), call.pop("v"), call.pop("o"), call.pop("lse"),
                             call.pop("d_o"), call.pop("dq"), call.pop("dk"), call.pop("dv"), call.pop("workspace"))

    with pytest.raises(TypeError, match=r"^lse must be float32 \(L is fp32 in every precision\); got float64$"):
        launch(lse=lse.double())
    with pytest.raises(flash_steps.InputError, match=r"^dk must have shape \[1, 2, 24, 64\] for these inputs"):
        launch(dk=torch.empty_like(q))
    with pytest.raises(flash_steps.InputError, match=r"^d_o is in CPU memory"):
        launch(d_o=d_o.cpu())
    with pytest.raises(flash_steps.InputError, match=r"^dq shares memory with q"):
        launch(dq=q)
    with pytest.raises(flash_steps.InputError, match=r"^dv is not contiguous"):
        launch(dv=torch.empty(1, 2, 64, 24, device=DEVICE).transpose(2, 3))
    if nbytes:
        with pytest.raises(flash_steps.InputError, match=rf"^{step.name} needs a workspace of {nbytes} bytes"):
            launch(workspace=None)
    with pytest.raises(TypeError, match=r"^deterministic must be True or False"):
        step.launch_backward(q, k, v, o, lse, d_o, dq, dk, dv, workspace, deterministic=None)


@pytest.mark.parametrize("step", [s for s in BACKWARD_STEPS if not s.has_deterministic_option],
                         ids=lambda s: s.name)
def test_a_step_with_atomics_only_refuses_the_deterministic_mode(step):
    # Steps 26 to 28, 30 and 31 sum dQ by atomicAdd only: asked for a fixed order, they say
    # so instead of returning gradients whose last bits change from run to run.
    (q, k, v), d_o = make_inputs(1, 2, 40, 24, 64, seed=6, dtype=getattr(torch, step.dtypes[0]))
    o, lse = step.attention_forward(q, k, v)
    message = rf"^{step.name} sums dQ by atomicAdd only"
    with pytest.raises(flash_steps.InputError, match=message):
        step.attention_backward(q, k, v, o, lse, d_o, deterministic=True)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    workspace = torch.empty(step.backward_workspace_bytes(step.check_inputs(q, k, v)), dtype=torch.uint8,
                            device=DEVICE)
    with pytest.raises(flash_steps.InputError, match=message):
        step.launch_backward(q, k, v, o, lse, d_o, dq, dk, dv, workspace, deterministic=True)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        leaves = [t.requires_grad_() for t in (q, k, v)]
        out, _ = fsp.attention(*leaves, False, step=step.name)
        # Raised inside the backward operator; autograd may hand it on as a RuntimeError.
        with pytest.raises((flash_steps.InputError, RuntimeError), match=message[1:]):
            out.sum().backward()
    finally:
        torch.use_deterministic_algorithms(previous)


@pytest.mark.parametrize("step", FORWARD_ONLY, ids=lambda s: s.name)
def test_a_forward_only_operator_refuses_backward(step):
    dtype = getattr(torch, step.dtypes[0])
    (q, k, v), _ = make_inputs(1, 2, 64, 64, 64, dtype=dtype)
    leaves = [t.requires_grad_() for t in (q, k, v)]
    o, _ = fsp.attention(*leaves, True, step=step.name)
    with pytest.raises(RuntimeError, match=rf"{step.name} has no backward pass; train with a step that has one: "
                                           rf".*step29_backward_deterministic"):
        o.sum().backward()
    with pytest.raises(flash_steps.InputError, match=rf"^{step.name} has no backward pass"):
        step.launch_backward(q.detach(), k.detach(), v.detach(), q.detach(), q.detach()[..., 0].float(),
                             q.detach(), *(torch.empty_like(q) for _ in range(3)))


@pytest.mark.parametrize("step", FP32_BACKWARD_STEPS, ids=lambda s: s.name)
def test_opcheck_with_gradients(step):
    # The forward operator with inputs that require grad: its autograd registration, and
    # AOTAutograd tracing forward and backward (the backward operator's fake) with dynamic
    # shapes. Then the backward operator on its own.
    (q, k, v), d_o = make_inputs(2, 2, 128, 96, 64, seed=5)
    leaves = [t.requires_grad_() for t in (q, k, v)]
    torch.library.opcheck(fsp.OPS[step.name], (*leaves, True, 0.125),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                                      "test_aot_dispatch_dynamic"))
    o, lse = fsp.OPS[step.name](q.detach(), k.detach(), v.detach(), True, 0.125)
    for deterministic in (False, True) if step.has_deterministic_option else (False,):
        torch.library.opcheck(fsp.BACKWARD_OPS[step.name],
                              (q.detach(), k.detach(), v.detach(), o, lse, d_o, True, 0.125, deterministic))


@pytest.mark.parametrize("step", SIXTEEN_BIT_BACKWARD_STEPS, ids=lambda s: s.name)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=lambda t: str(t).split(".")[1])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_16bit_gradients_pass_the_rule_in_their_precision(step, dtype, causal):
    # A 16-bit step's gradients through its operator and autograd, in its dtype, judged by the
    # C++ tests' gradient rule in that precision (SDPA's float32 gradients are no yardstick for
    # them); with torch.use_deterministic_algorithms, bitwise the same twice (a step whose dQ
    # is summed by atomics only refuses that mode: the test above).
    (q, k, v), d_o = make_inputs(2, 3, 200, 77, 64, seed=8, dtype=dtype)
    grads, _, _ = step_gradients(step, q, k, v, d_o, causal, None)
    for g, t in zip(grads, (q, k, v)):
        assert g.dtype == dtype and g.shape == t.shape and torch.isfinite(g).all()
    numpy = [t.float().cpu().numpy() for t in (q, k, v, d_o, *grads)]
    precision = {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    verdict = flash_steps.check_gradients(*numpy, causal=causal, dtype=precision)
    assert verdict.passed, f"{step.name} {precision} causal={causal}: {verdict!r}"
    if not step.has_deterministic_option:
        return
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        first, _, _ = step_gradients(step, q, k, v, d_o, causal, None)
        second, _, _ = step_gradients(step, q, k, v, d_o, causal, None)
    finally:
        torch.use_deterministic_algorithms(previous)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def record_graphs():
    """An AOTAutograd backend that keeps the forward and backward graphs it is given."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = {"forward": [], "backward": []}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind].append(gm)
            return make_boxed_func(gm.forward)
        return compiler

    return aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward")), graphs


@pytest.mark.parametrize("step", FP32_BACKWARD_STEPS, ids=lambda s: s.name)
def test_torch_compile_fullgraph_of_a_training_step(step):
    # A training step compiled whole: projections, attention and a loss traced by Dynamo
    # with fullgraph=True; AOTAutograd derives the backward graph, which must call the
    # step's backward operator. Gradients equal those of the same function run eagerly.
    torch._dynamo.reset()
    gen = torch.Generator(DEVICE).manual_seed(6)
    x = torch.randn(2, 96, 128, device=DEVICE, generator=gen)
    weights = [(torch.randn(128, 128, device=DEVICE, generator=gen) / 128**0.5).requires_grad_() for _ in range(3)]

    def loss_fn(x, wq, wk, wv):
        q, k, v = ((x @ w).view(2, 96, 2, 64).transpose(1, 2) for w in (wq, wk, wv))
        o, _ = fsp.attention(q, k, v, True, step=step.name)
        return o.square().mean()

    backend, graphs = record_graphs()
    compiled = torch.compile(loss_fn, fullgraph=True, backend=backend)
    loss = compiled(x, *weights)
    loss.backward()
    compiled_grads = [w.grad.clone() for w in weights]
    assert len(graphs["forward"]) == 1 and len(graphs["backward"]) == 1
    backward_code = graphs["backward"][0].code
    assert f"flash_steps.{step.name}_backward" in backward_code, backward_code
    for w in weights:
        w.grad = None
    eager = loss_fn(x, *weights)
    eager.backward()
    torch.testing.assert_close(loss, eager, rtol=1e-5, atol=0)
    for got, want in zip(compiled_grads, (w.grad for w in weights)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("step", FP32_BACKWARD_STEPS, ids=lambda s: s.name)
def test_torch_compile_inductor_trains_through_the_step(step):
    # The default backend (Inductor) and dynamic shapes: a few lengths, one compilation each at most.
    torch._dynamo.reset()

    def loss_fn(q, k, v):
        o, _ = fsp.attention(q, k, v, True, step=step.name)
        return (o * o).sum()

    compiled = torch.compile(loss_fn, fullgraph=True, dynamic=True)
    for n in (64, 100, 257):
        (q, k, v), _ = make_inputs(1, 2, n, n, 64, seed=n)
        leaves = [t.requires_grad_() for t in (q, k, v)]
        grads = torch.autograd.grad(compiled(*leaves), leaves)
        expected = torch.autograd.grad(loss_fn(*leaves), leaves)
        for got, want in zip(grads, expected):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("step", FP32_BACKWARD_STEPS, ids=lambda s: s.name)
def test_cuda_graph_capture_of_forward_and_backward(step):
    # The operators enqueue on the current stream and allocate through PyTorch, so a whole
    # training step (forward, autograd's backward) can be captured and replayed.
    (q, k, v), d_o = make_inputs(2, 2, 200, 200, 64, seed=7)
    leaves = [t.requires_grad_() for t in (q, k, v)]

    def train_step():
        o, _ = fsp.attention(*leaves, True, step=step.name)
        return torch.autograd.grad(o, leaves, d_o)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up outside the capture (allocator, lazy initialisation)
            train_step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = train_step()
    with torch.no_grad():
        for t, scale in zip(leaves, (0.5, 2.0, -1.0)):
            t.mul_(scale)  # new inputs in the same memory
    graph.replay()
    torch.cuda.synchronize()
    expected = train_step()
    for got, want in zip(captured, expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
