"""The GPU steps as PyTorch operators, for eager code, torch.compile and models.

    import torch
    import flash_steps.pytorch as fsp

    q, k, v = (torch.randn(2, 8, 1024, 64, device="cuda") for _ in range(3))
    o = fsp.scaled_dot_product_attention(q, k, v, is_causal=True)       # like F.scaled_dot_product_attention
    o, lse = torch.ops.flash_steps.step06_fa2(q, k, v, True, 0.125)     # one step's operator

Each GPU step of the build is registered with ``torch.library.custom_op`` as
``flash_steps::<step name>`` (``q, k, v, causal, scale -> (o, lse)``; scale None: 1/sqrt(d)) together with a fake
implementation (``register_fake``: O and L's shapes from Q's, no GPU work), so that
``torch.compile(fullgraph=True)`` traces a model through the operator instead of
breaking the graph, and FakeTensor/meta tensors can flow through it.

The operator takes CUDA tensors [B, H, N, d] of a dtype the step computes in (``Step.dtypes``:
float32 for the fp32 steps, bfloat16 or float16 for the steps that compute in bf16/fp16);
q, k and v share it, O comes back in it and L in float32, as FlashAttention-2 returns them.
Views (a transposed [B, N, H, d]
layout, as attention layers make) are copied to contiguous tensors first, as SDPA
would; the kernel then runs on them through DLPack without a further copy, on the
current stream.

Gradients: the operator of a step with a backward pass (``Step.has_backward``: step26 to step29 in
fp32, step30 to step32 in bf16 and fp16, step33 in bf16 and fp16 on Hopper for d = 64, 96, 128) has an autograd formula (``register_autograd``), so ``loss.backward()`` runs through
it: the forward saves Q, K, V, O and L, and the backward calls a second operator,
``flash_steps::<step name>_backward`` (``q, k, v, o, lse, d_o, causal, scale, deterministic ->
(dq, dk, dv)``, also with a fake implementation), which runs the step's backward kernels on
the saved tensors and dO. dQ is summed by atomics unless
``torch.use_deterministic_algorithms(True)`` is on, which asks the step for its fixed-order
dQ. L is returned marked non-differentiable: a loss that uses L gets no gradient through it
(as in FlashAttention's own ``flash_attn_func``). The operators of the forward-only steps
refuse ``backward()`` with a RuntimeError naming the steps that have one. Like SDPA, and
like ``Step.attention_forward`` unless asked (``check_finite=True``), the operator does not
scan the inputs for NaN or infinity (that needs a wait for the GPU, which has no place in a
compiled graph): NaN in, NaN out. It only enqueues the kernel on the current stream, so it
can be captured in a CUDA graph.

Without ``step``, ``attention`` and ``scaled_dot_product_attention`` run ``default_step(q)``:
the last built step (the fastest) that takes q's dtype and head dimension on q's GPU; when a
gradient is needed, the last such step with a backward pass: step33 for bf16 and fp16 at
d = 64, 96, 128 on an H100 or H200, step32 for them elsewhere (d = 32 to 128), step29 for float32.
"""

import re
from typing import Optional

import torch

import flash_steps

__all__ = ["OPS", "BACKWARD_OPS", "DEFAULT_STEP", "DEFAULT_BACKWARD_STEP", "MIN_TORCH", "attention",
           "default_step", "scaled_dot_product_attention", "op"]

#: The oldest PyTorch this layer runs on: 2.4 brought ``torch.library.custom_op`` and ``register_fake``.
MIN_TORCH = (2, 4)


def _require_torch(version):
    """ImportError unless ``version`` (torch.__version__, e.g. '2.4.1+cu121') is MIN_TORCH or newer."""
    found = re.match(r"(\d+)\.(\d+)", str(version))
    if found is None or tuple(int(part) for part in found.groups()) < MIN_TORCH:
        wanted = ".".join(map(str, MIN_TORCH))
        raise ImportError(f"flash_steps.pytorch needs PyTorch >= {wanted} (torch.library.custom_op); "
                          f"this is torch {version}")


_require_torch(getattr(torch, "__version__", "unknown"))


def _body(step, q, k, v, causal, scale):
    """The operator's body, which the eager path of attention() also calls: contiguous, since
    DLPack lends no views (a transposed layout is copied, as SDPA copies it); then
    attention_forward's path for PyTorch tensors: on the current stream (the tensors were made
    on it, so nothing waits and CUDA graph capture is not disturbed), the step's one-line
    errors, no scan for NaN, nothing waited for."""
    # is_contiguous() is an attribute read; contiguous() goes through the dispatcher even when it
    # returns the tensor itself (about 0.4 us each on an H200's host).
    q, k, v = (t if t.is_contiguous() else t.contiguous() for t in (q, k, v))
    return flash_steps._Torch.forward(step, q, k, v, causal, scale)


def _register(step):
    """Registers ``step`` as the operator flash_steps::<step.name>; returns it."""

    @torch.library.custom_op(f"flash_steps::{step.name}", mutates_args=())
    def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                scale: Optional[float]) -> tuple[torch.Tensor, torch.Tensor]:
        return _body(step, q, k, v, causal, scale)

    @forward.register_fake
    def _(q, k, v, causal, scale):
        # What the real operator returns, without running it: O like Q (contiguous, Q's
        # dtype), L one dimension less and float32 whatever Q's dtype, both on Q's device.
        torch._check(q.dim() == 4, lambda: f"q must have 4 dimensions [B, H, N, d], got {q.dim()}")
        torch._check(k.dtype == q.dtype and v.dtype == q.dtype,
                     lambda: f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
        return q.new_empty(q.shape), q.new_empty(q.shape[:-1], dtype=torch.float32)

    if step.has_backward:
        _register_autograd(forward, _register_backward(step))
    else:
        _refuse_autograd(forward, step)
    return forward


def _register_backward(step):
    """Registers the backward pass of ``step`` as flash_steps::<step.name>_backward; returns it."""

    @torch.library.custom_op(f"flash_steps::{step.name}_backward", mutates_args=())
    def backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                 d_o: torch.Tensor, causal: bool, scale: Optional[float],
                 deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # As the forward: detached (DLPack refuses tensors that require grad), contiguous
        # (DLPack lends no views; dO of a transposed layout arrives strided).
        q, k, v, o, lse, d_o = (t.detach().contiguous() for t in (q, k, v, o, lse, d_o))
        # Each tensor lent as a capsule made on the current stream, as the forward lends them:
        # Tensor.__dlpack__(stream=...) is Python that looks up two streams, 12 us or more a tensor.
        _, to_dlpack, raw_stream = flash_steps._torch_calls()
        stream = raw_stream(q.get_device()) if q.is_cuda else None
        # The step's one-line errors, before allocating.
        shape = step.check_inputs(to_dlpack(q), to_dlpack(k), to_dlpack(v))
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)  # Q's dtype
        nbytes = step.backward_workspace_bytes(shape, deterministic)
        workspace = to_dlpack(torch.empty(nbytes, dtype=torch.uint8, device=q.device)) if nbytes else None
        step.launch_backward(*(to_dlpack(t) for t in (q, k, v, o, lse, d_o, dq, dk, dv)), workspace, causal=causal,
                             scale=scale, deterministic=deterministic, stream=stream)
        return dq, dk, dv

    @backward.register_fake
    def _(q, k, v, o, lse, d_o, causal, scale, deterministic):
        # dQ like Q, dK and dV like K (contiguous, Q's dtype), as the real operator allocates them.
        torch._check(q.dim() == 4 and k.dim() == 4, lambda: "q and k must have 4 dimensions [B, H, N, d]")
        torch._check(lse.dtype == torch.float32, lambda: f"lse must be float32, got {lse.dtype}")
        return q.new_empty(q.shape), q.new_empty(k.shape), q.new_empty(v.shape)

    return backward


def _register_autograd(forward, backward):
    """Gives the operator ``forward`` its gradient: ``backward`` on what the forward saved."""

    def setup_context(ctx, inputs, output):
        q, k, v, causal, scale = inputs
        o, lse = output
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale = causal, scale
        # The backward computes dQ, dK, dV from dO alone: a gradient reaching L would be
        # dropped, so L says it has none rather than be silently ignored.
        ctx.mark_non_differentiable(lse)

    def gradients(ctx, grad_o, grad_lse):
        q, k, v, o, lse = ctx.saved_tensors
        # Read when the backward runs (or is traced): PyTorch's switch for bitwise-repeatable results.
        deterministic = torch.are_deterministic_algorithms_enabled()
        dq, dk, dv = backward(q, k, v, o, lse, grad_o.contiguous(), ctx.causal, ctx.scale, deterministic)
        return dq, dk, dv, None, None  # causal and scale have no gradient

    forward.register_autograd(gradients, setup_context=setup_context)


def _refuse_autograd(forward, step):
    """A forward-only step: backward() through its operator raises, naming the steps that have one."""

    def setup_context(ctx, inputs, output):
        pass

    def gradients(ctx, grad_o, grad_lse):
        with_backward = [s.name for s in flash_steps.gpu_steps() if s.has_backward]
        raise RuntimeError(f"{step.name} has no backward pass; train with a step that has one: "
                           f"{', '.join(with_backward) or 'none in this build'}")

    forward.register_autograd(gradients, setup_context=setup_context)


#: The operators, by step name: one per GPU step of this build.
OPS = {step.name: _register(step) for step in flash_steps.gpu_steps()}

#: The backward operators, by step name: one per GPU step with a backward pass.
BACKWARD_OPS = {name: getattr(torch.ops.flash_steps, f"{name}_backward") for name in OPS
                if flash_steps.step(name).has_backward}

#: The last forward GPU step built (the fastest rung; a backward step's forward is an earlier
#: step's): the step used when none is named, no gradient is needed, and no other tensors
#: are given to choose by (default_step falls back from it by d, dtype and GPU).
DEFAULT_STEP = next((s.name for s in reversed(flash_steps.gpu_steps()) if not s.extends), None)

#: The last GPU step with a backward pass (step33_backward_hopper where it is built: bfloat16
#: and float16 tensors, d = 64, 96, 128, on an H100 or H200; step32_backward_tc_deterministic takes
#: bfloat16 and float16 on any of the CUDA steps' GPUs, step29_backward_deterministic float32): the step used
#: when none is named, a gradient is needed and no tensor is given to choose by, and whose
#: one-line error is raised where default_step finds no fit.
DEFAULT_BACKWARD_STEP = next(reversed(BACKWARD_OPS), None)

#: The dtypes' names as Step.dtypes spells them.
_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}

#: Compute capability (major*10 + minor) by CUDA device index, asked of PyTorch once a device.
_CAPABILITY = {}


def _capability_of(index):
    if index not in _CAPABILITY:
        major, minor = torch.cuda.get_device_capability(index)
        _CAPABILITY[index] = 10 * major + minor
    return _CAPABILITY[index]


# torch.compile runs it once while it traces and takes the answer as a constant: no device
# query in the graph (where it would break the graph).
_capability_of = getattr(torch.compiler, "assume_constant_result", lambda f: f)(_capability_of)


def _capability(device):
    if device.type != "cuda":
        return 0  # meta tensors: any step's fake implementation will do
    return _capability_of(device.index if device.index is not None else torch.cuda.current_device())


def default_step(q, *, backward=False):
    """The name of the step a call without ``step`` runs for query tensor ``q``: the last built
    GPU step (the fastest) that takes q's dtype and head dimension on q's GPU (among the steps
    with a backward pass when ``backward``), so that float32 tensors, or a d the Hopper steps
    were not compiled for, fall back to an earlier step instead of being refused. Where no step
    fits, DEFAULT_STEP (or DEFAULT_BACKWARD_STEP), whose one-line error says what it takes."""
    chosen = flash_steps.fastest_step(q.shape[-1], _DTYPE_NAMES.get(q.dtype), _capability(q.device),
                                      backward=backward)
    if chosen is not None:
        return chosen.name
    return DEFAULT_BACKWARD_STEP if backward and DEFAULT_BACKWARD_STEP else DEFAULT_STEP


def op(step=None, *, backward=False, like=None):
    """The operator of ``step`` (a name, short name, number or Step). None: default_step(like)
    when a query tensor ``like`` is given, else DEFAULT_STEP, or DEFAULT_BACKWARD_STEP with
    ``backward=True`` (the step for a forward that will be differentiated)."""
    return OPS[_op_name(step, backward, like)]


def _op_name(step, backward, like):
    """The name of op()'s operator."""
    if not OPS:
        raise flash_steps.NoGpuError("this build of flash_steps has no GPU steps (it was built without CUDA)")
    if step is None and like is not None:
        name = default_step(like, backward=backward)
    elif step is None:
        name = DEFAULT_BACKWARD_STEP if backward and DEFAULT_BACKWARD_STEP else DEFAULT_STEP
    elif isinstance(step, str) and step in OPS:
        name = step
    else:
        name = flash_steps.step(step).name
    if name not in OPS:
        raise ValueError(f"{name} runs on the CPU; the PyTorch operators are the GPU steps: {', '.join(OPS)}")
    return name


#: The eager path's step choices, by (step argument, d, dtype, device index): default_step
#: and the name look-ups once per kind of call instead of once per call.
_EAGER_STEPS = {}


def _eager_step(step, q):
    """The Step that op(step, like=q) would run, for a call that needs no gradient, memoised."""
    key = (getattr(step, "name", step), q.shape[-1], q.dtype, q.device.index)
    chosen = _EAGER_STEPS.get(key)
    if chosen is None:
        chosen = _EAGER_STEPS[key] = flash_steps.step(_op_name(step, False, q))
    return chosen


def _plain_eager(*tensors):
    """Whether a call on ``tensors`` may skip the operator and run the step directly: eager
    (not traced by torch.compile or torch.jit), plain CUDA tensors (not FakeTensors, meta
    tensors or other subclasses that the operator's fake implementation serves), and no
    gradient to record."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return False
    grad = torch.is_grad_enabled()
    return all(type(t) is torch.Tensor and t.is_cuda and not (grad and t.requires_grad) for t in tensors)


def attention(q, k, v, causal=False, scale=None, *, step=None):
    """(o, lse) of ``step`` for CUDA tensors q [B, H, N_q, d], k and v [B, H, N_kv, d].

    Differentiable through O when the step has a backward pass. step None: default_step(q),
    the fastest built step for q's dtype, d and GPU; among the steps with a backward pass
    when autograd is recording and q, k or v requires grad."""
    causal, scale = bool(causal), None if scale is None else float(scale)
    if _plain_eager(q, k, v):
        # The operator's own body, without the dispatcher and custom_op's Python around it
        # (35 of the 48 us a launch-bound call cost through the operator on an H100): the same
        # kernel on the same stream, so the call stays capturable in a CUDA graph.
        return _body(_eager_step(step, q), q, k, v, causal, scale)
    training = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    # None reaches the step, which takes 1/sqrt(d): no arithmetic on a size that
    # torch.compile may have made symbolic.
    return op(step, backward=training, like=q)(q, k, v, causal, scale)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None, enable_gqa=False, *, step=None):
    """O like ``torch.nn.functional.scaled_dot_product_attention``, computed by a step.

    The same arguments, for CUDA tensors [B, H, N, d] of one of the step's dtypes (float32;
    bfloat16 or float16 for the steps that compute in them); O has the inputs' dtype, as
    SDPA's does; step None: default_step(query). The steps apply no mask
    but the causal one (``is_causal``, top-left aligned as in SDPA) and no dropout: an
    ``attn_mask`` or a ``dropout_p`` is refused with a ValueError. ``enable_gqa``: K and V
    may have fewer heads than Q (a divisor), repeated to Q's as SDPA does.
    """
    if attn_mask is not None:
        raise ValueError("the steps apply only the causal mask (is_causal=True); attn_mask is not supported")
    if dropout_p != 0.0:
        raise ValueError("the steps compute the forward pass without dropout; dropout_p must be 0")
    if enable_gqa and key.shape[1] != query.shape[1]:
        groups = query.shape[1] // key.shape[1]
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    o, _ = attention(query, key, value, is_causal, scale, step=step)
    return o
