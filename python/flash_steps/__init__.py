"""FlashAttention, step by step: every step built in this tree, callable from Python.

    import numpy as np
    import flash_steps

    q = np.random.default_rng(0).standard_normal((1, 4, 256, 64), dtype=np.float32)
    o, lse = flash_steps.step02.attention_forward(q, q, q, causal=True)
    print(flash_steps.check_result(q, q, q, o, lse, causal=True))   # Verdict(passed, ...)

Every step has the C++ steps' entry point, ``attention_forward(q, k, v, causal=False,
scale=None) -> (o, lse)``: O is [B, H, N_q, d], L (the natural-log logsumexp of each
scaled score row) is [B, H, N_q]; ``scale`` defaults to 1/sqrt(d); ``causal`` is
PyTorch's top-left convention (query i sees keys j <= i).

What a step takes, and what it gives back:

* NumPy arrays, float32, [B, H, N, d], any strides (they are copied, as every step
  copies its inputs into its Problem): every step. A GPU step uploads them, runs once
  and downloads O and L. O and L come back as NumPy arrays.
* CUDA tensors of any framework that speaks DLPack (PyTorch, CuPy, JAX): the GPU steps,
  without a copy, on the caller's current stream (PyTorch's or CuPy's; the legacy
  default stream for others), not waited for (``check_finite=True`` adds a scan for NaN
  and infinity and a wait for the stream). They must be contiguous and start on a 16-byte boundary:
  a view is refused, not silently copied, because the copy is the caller's to choose.
  O and L come back as tensors of the caller's framework: allocated by PyTorch or CuPy
  themselves (their allocators, their streams), for any other framework in device
  memory this module owns, handed over through the framework's ``from_dlpack``.
* Precisions (``Step.precisions``: 'fp32', 'bf16', 'fp16', the step's own first). NumPy
  arrays are float32 in and out for every step; ``dtype='bf16'`` (or 'fp16', 'fp32') asks a
  step that computes in several for one of them (None: its own), and a step rounds Q, K
  and V to it once on upload and hands O back widened to float32. CUDA tensors compute in
  their own dtype, one of ``Step.dtypes`` (float32 for fp32 steps; bfloat16 or float16 for
  steps that compute in bf16/fp16): q, k and v share it, O comes back in it, L in float32.

Bad input raises, with the programs' one-line message: a wrong type or dtype is a
``TypeError``; a wrong shape, sizes that disagree, an unsupported d, NaN or infinity in
an input (NumPy arrays; CUDA tensors with ``check_finite=True``), a tensor on the wrong
device are ``InputError`` (a ``ValueError``); no GPU is
``NoGpuError`` (a ``RuntimeError``); a CUDA error is a ``RuntimeError``.

The steps with a backward pass (``Step.has_backward``: step25 on the CPU, step26 to step29 in fp32
CUDA, step30 to step32 in bf16 and fp16 on the tensor cores, step33 in bf16 and fp16 on Hopper for
d = 64, 96, 128) also have ``attention_backward(q, k, v, o, lse, d_o) -> (dq, dk, dv)``: the forward's O
and L and the upstream gradient dO = dloss/dO in, the gradients of Q, K and V out, on
NumPy arrays (every such step) or CUDA tensors (GPU steps). ``reference_backward`` and
``check_gradients`` are the fp64 gradients and the gradient rule the C++ tests use.

``flash_steps.pytorch`` registers the GPU steps as PyTorch operators (torch.compile
traces through them); ``flash_steps.hf`` makes a step an attention implementation of
Hugging Face transformers.
"""

import sys as _sys

import numpy as _np

from . import _native
from ._native import (
    InputError,
    NoGpuError,
    Shape,
    GradientVerdict,
    Verdict,
    check_gradients,
    check_result,
    gpu_available,
    reference_attention,
    reference_backward,
    unbuilt_steps,
)

__all__ = [
    "GradientVerdict",
    "InputError",
    "NoGpuError",
    "Shape",
    "Step",
    "Verdict",
    "check_gradients",
    "check_result",
    "gpu_available",
    "gpu_steps",
    "backward_steps",
    "capable_steps",
    "fastest_step",
    "reference_attention",
    "reference_backward",
    "step",
    "steps",
    "unbuilt_steps",
]


class Step:
    """One step of the tutorial: its description (the C++ StepInfo), its forward pass and, for
    the backward steps, its backward pass."""

    def __init__(self, native):
        self._native = native
        # Plain Python copies of the StepInfo's fields: code that torch.compile traces
        # (flash_steps.pytorch picks a step by name) sees no call into the extension.
        self.name = native.name  #: directory name, e.g. 'step06_fa2'
        self.title = native.title  #: one line: what the step adds
        self.needs_gpu = native.needs_gpu  #: runs on a CUDA GPU
        self.head_dims = list(native.head_dims)  #: supported d (empty: any d >= 1)
        #: the one GPU generation its machine code runs on, major*10 + minor (90: Hopper); 0: any
        self.compute_capability = native.compute_capability
        self.dtypes = list(native.dtypes)  #: the dtypes of the CUDA tensors it takes: ['bfloat16', 'float16']
        self.precisions = list(native.precisions)  #: the precisions it computes in (--dtype), its own first
        self.uses_sram_budget = native.uses_sram_budget  #: tiles from an SRAM budget M
        self.has_backward = native.has_backward  #: has attention_backward
        self.needs_workspace = native.needs_workspace  #: launch() takes a workspace (workspace_bytes)
        self.extends = native.extends  #: backward steps: the forward step this one extends ('' otherwise)
        #: backward steps: deterministic=True sums dQ in a fixed order instead of by atomics
        self.has_deterministic_option = native.has_deterministic_option
        self.short_name = self.name[:6]  #: 'step06' for step06_fa2: the C++ namespace, this module's attribute

    def attention_forward(self, q, k, v, causal=False, scale=None, *, dtype=None, stream=None,
                          check_finite=False, sram_floats=0):
        """(o, lse) for q [B, H, N_q, d], k and v [B, H, N_kv, d] (see the module's help).

        dtype: NumPy arrays: the precision to compute in, 'fp32', 'bf16' or 'fp16' (None: the
            step's own, ``precisions[0]``); the arrays stay float32 in and out. CUDA tensors
            compute in their own dtype: a dtype naming another is a TypeError.
        stream: GPU steps on CUDA tensors: the CUDA stream to run on, as an integer handle
            (default: the caller's framework's current stream).
        check_finite: GPU steps on CUDA tensors: refuse NaN and infinity in q, k, v, as the
            programs do (one small kernel per tensor and a wait for the stream). Off by
            default, as in SDPA (NaN in, NaN out): the call then only enqueues the kernel.
            NumPy inputs are always checked.
        sram_floats: the SRAM budget M of the steps that derive tiles from it (0: default).
        """
        if isinstance(q, _np.ndarray) or not self.needs_gpu:
            return self._native.forward(q, k, v, causal=causal, scale=scale, sram_floats=sram_floats,
                                        dtype=dtype)
        return _forward_on_gpu(self, q, k, v, causal, scale, dtype, stream, check_finite)

    def check_inputs(self, q, k, v, *, stream=None):
        """The Shape of CUDA tensors q, k, v, checked as launch() checks them (GPU steps)."""
        return self._native.check_inputs(q, k, v, stream=stream)

    def launch(self, q, k, v, o, lse, workspace=None, *, causal=False, scale=None, stream=None,
               check_finite=False):
        """Enqueues the step's kernel on CUDA tensors (GPU steps): reads q, k, v, writes o and lse
        in place, through DLPack, without a copy; returns at once. ``workspace``: at least
        ``workspace_bytes(shape, causal)`` bytes of device memory (None when that is 0)."""
        self._native.launch(q, k, v, o, lse, workspace, causal=causal, scale=scale, stream=stream,
                            check_finite=check_finite)

    def workspace_bytes(self, shape, causal=False):
        """Bytes of device memory launch() needs as ``workspace`` for ``shape`` and the mask (0:
        none; step 24 counts claimed tiles only when causal)."""
        return self._native.workspace_bytes(shape, causal)

    def attention_backward(self, q, k, v, o, lse, d_o, causal=False, scale=None, *, dtype=None,
                           deterministic=False, stream=None, sram_floats=0):
        """(dq, dk, dv) for q [B, H, N_q, d], k and v [B, H, N_kv, d], the forward's o [B, H, N_q, d]
        and lse [B, H, N_q], and the upstream gradient d_o = dloss/dO [B, H, N_q, d].

        Steps with a backward pass only (``has_backward``); another raises InputError naming
        the steps that have one. NumPy arrays: float32 in and out, checked for NaN and
        infinity (o, lse and d_o too), any step with a backward; ``dtype`` as for
        attention_forward. CUDA tensors (GPU steps): q, k, v, o, d_o of one of the step's
        dtypes, lse float32, contiguous; dq, dk, dv come back in q's dtype, allocated by the
        caller's framework, computed on its current stream (or ``stream``), not scanned for NaN.
        deterministic: sum dQ in a fixed order (bitwise-repeatable) instead of by atomics,
        for the steps that offer it (``has_deterministic_option``).
        """
        if isinstance(q, _np.ndarray) or not self.needs_gpu:
            return self._native.backward(q, k, v, o, lse, d_o, causal=causal, scale=scale,
                                         sram_floats=sram_floats, dtype=dtype, deterministic=deterministic)
        return _backward_on_gpu(self, q, k, v, o, lse, d_o, causal, scale, dtype, deterministic, stream)

    def launch_backward(self, q, k, v, o, lse, d_o, dq, dk, dv, workspace=None, *, causal=False, scale=None,
                        deterministic=False, stream=None):
        """Enqueues the step's backward pass on CUDA tensors (GPU steps with a backward): reads q,
        k, v, o, lse, d_o, writes dq, dk, dv in place, through DLPack, without a copy; returns at
        once. ``workspace``: at least ``backward_workspace_bytes(shape, deterministic)`` bytes of
        device memory (None when that is 0)."""
        self._native.launch_backward(q, k, v, o, lse, d_o, dq, dk, dv, workspace, causal=causal, scale=scale,
                                     deterministic=deterministic, stream=stream)

    def backward_workspace_bytes(self, shape, deterministic=False):
        """Bytes of device memory launch_backward() needs as ``workspace`` for ``shape`` (0: none)."""
        return self._native.backward_workspace_bytes(shape, deterministic)

    def __repr__(self):
        return f"<Step {self.name}: {self.title}>"


# --------------------------------------------------------------------------------------
# GPU steps on CUDA tensors: outputs allocated by the caller's framework.


#: Workspace bytes by (step name, q's shape, k's shape), for _Torch.forward: a model calls
#: attention with a few shapes over and over. At most _WORKSPACE_SHAPES_KEPT shapes, then forgotten.
_WORKSPACE_BYTES = {}
_WORKSPACE_SHAPES_KEPT = 1024


class _Torch:
    """PyTorch: its caching allocator and its current stream."""

    @staticmethod
    def stream(x):
        import torch

        if x.device.type != "cuda":
            return None  # no stream to follow: check_inputs says where the tensor should be
        return torch.cuda.current_stream(x.device).cuda_stream

    @staticmethod
    def lend(x):
        # A tensor that requires grad refuses __dlpack__; the step only reads it.
        return x.detach()

    @staticmethod
    def forward(step, q, k, v, causal, scale, check_finite=False):
        """(o, lse) of ``step`` on PyTorch tensors, on the current stream: the torch operator's
        path and attention_forward's. A small problem's time is this host work, so it does
        only what a call needs: O and L from PyTorch's allocator, each tensor lent as a DLPack
        capsule made for the current stream (``to_dlpack``: the tensors were made on that
        stream, so nothing to wait for), and one call into the module that checks q, k, v and
        the outputs, as launch() does, and enqueues the kernel. Not waited for unless
        ``check_finite``."""
        torch, to_dlpack, raw_stream = _torch_calls()
        q, k, v = (t.detach() if t.requires_grad else t for t in (q, k, v))
        stream = raw_stream(q.get_device()) if q.is_cuda else None
        workspace = None
        if step.needs_workspace:  # steps 4 and 5: m and l in global memory; step 24, causal: its tile counter
            # Sized from the checked shape and the mask, once per step, shapes and mask (the launch
            # checks every call's tensors again; a size of 0 saves an allocation a call); q, k, v
            # lent as capsules, as for the launch: Tensor.__dlpack__(stream=...) is Python that
            # looks up two streams (12 us or more a tensor on an H200's host, to_dlpack 0.2 us).
            key = (step.name, tuple(q.shape), tuple(k.shape), causal)
            nbytes = _WORKSPACE_BYTES.get(key)
            if nbytes is None:
                nbytes = step.workspace_bytes(step.check_inputs(to_dlpack(q), to_dlpack(k), to_dlpack(v)), causal)
                if len(_WORKSPACE_BYTES) >= _WORKSPACE_SHAPES_KEPT:
                    _WORKSPACE_BYTES.clear()
                _WORKSPACE_BYTES[key] = nbytes
            workspace = to_dlpack(q.new_empty(nbytes, dtype=torch.uint8)) if nbytes else None
        # O in the inputs' dtype, L in float32, as FlashAttention-2 returns them.
        o, lse = torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)
        step._native.launch(to_dlpack(q), to_dlpack(k), to_dlpack(v), to_dlpack(o), to_dlpack(lse), workspace,
                            causal=causal, scale=scale, stream=stream, check_finite=check_finite)
        return o, lse

    @staticmethod
    def empty(shape, like, dtype=None):
        """Uninitialised [shape] on like's device: like's dtype, or 'float32' or 'uint8'."""
        import torch

        return torch.empty(shape, dtype=like.dtype if dtype is None else getattr(torch, dtype), device=like.device)


class _CuPy:
    """CuPy: its memory pool and its current stream."""

    @staticmethod
    def stream(x):
        import cupy

        with x.device:
            return cupy.cuda.get_current_stream().ptr

    @staticmethod
    def lend(x):
        return x

    @staticmethod
    def empty(shape, like, dtype=None):
        import cupy

        with like.device:
            return cupy.empty(shape, dtype=like.dtype if dtype is None else dtype)


_FRAMEWORKS = {"torch": _Torch, "cupy": _CuPy}

_TORCH_CALLS = None


def _torch_calls():
    """(torch, to_dlpack, the raw cudaStream_t of a device's current stream), looked up once."""
    global _TORCH_CALLS
    if _TORCH_CALLS is None:
        import torch
        from torch.utils.dlpack import to_dlpack

        # The integer handle straight from PyTorch's C++ (what Inductor's generated code
        # calls); torch.cuda.current_stream() builds a Stream object first.
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _TORCH_CALLS = (torch, to_dlpack,
                        raw or (lambda device: torch.cuda.current_stream(device).cuda_stream))
    return _TORCH_CALLS


def _framework_name(x):
    return type(x).__module__.split(".")[0]


def _from_dlpack_of(x):
    """The ``from_dlpack`` of x's framework, or None."""
    name = _framework_name(x)
    if name in ("jax", "jaxlib"):
        import jax.numpy

        return jax.numpy.from_dlpack
    return getattr(_sys.modules.get(name), "from_dlpack", None)


#: The precisions' names as the programs spell them ('bf16') and as dtypes ('bfloat16').
_DTYPE_OF_PRECISION = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _tensor_dtype(step, q, dtype, framework, stream):
    """q's dtype where it is needed (a ``dtype`` to compare, or no framework to allocate with), else
    None; TypeError when ``dtype`` names another precision than q's."""
    # One of step.dtypes, checked by check_inputs; asked only where needed (one more __dlpack__).
    tensor_dtype = _native.dtype_of(q, stream=stream) if dtype is not None or framework is None else None
    if dtype is not None and _DTYPE_OF_PRECISION.get(dtype) != tensor_dtype:
        raise TypeError(f"dtype={dtype!r} but q is {tensor_dtype}; CUDA tensors compute in their own dtype "
                        f"({step.name} takes {', '.join(step.dtypes)}): convert them first")
    return tensor_dtype


def _forward_on_gpu(step, q, k, v, causal, scale, dtype, stream, check_finite):
    framework = _FRAMEWORKS.get(_framework_name(q))
    if framework is _Torch and stream is None and dtype is None and _framework_name(k) == _framework_name(v) == "torch":
        return _Torch.forward(step, q, k, v, causal, scale, check_finite)
    if framework is not None:
        q, k, v = framework.lend(q), framework.lend(k), framework.lend(v)
        if stream is None:
            stream = framework.stream(q)
    shape = step.check_inputs(q, k, v, stream=stream)  # the one-line errors, before anything is allocated
    tensor_dtype = _tensor_dtype(step, q, dtype, framework, stream)
    o_shape = (shape.batch, shape.heads, shape.seq_q, shape.head_dim)
    lse_shape = o_shape[:3]
    nbytes = step.workspace_bytes(shape, causal)
    if framework is not None:
        # O in the inputs' dtype, L in float32, as FlashAttention-2 returns them.
        o, lse = framework.empty(o_shape, q), framework.empty(lse_shape, q, "float32")
        workspace = framework.empty(nbytes, q, "uint8") if nbytes else None
        step.launch(q, k, v, o, lse, workspace, causal=causal, scale=scale, stream=stream,
                    check_finite=check_finite)
        return o, lse
    # Any other framework (JAX, ...): memory this module owns, handed over through DLPack
    # once the kernel has finished (so the consumer's stream needs no event to wait on).
    device = _native.device_of(q)
    o = _native.DeviceArray(o_shape, device, tensor_dtype)
    lse = _native.DeviceArray(lse_shape, device, "float32")
    workspace = _native.DeviceArray(((nbytes + 3) // 4,), device) if nbytes else None
    step.launch(q, k, v, o, lse, workspace, causal=causal, scale=scale, stream=stream,
                check_finite=check_finite)
    _native.synchronize(stream)
    from_dlpack = _from_dlpack_of(q)
    return (from_dlpack(o), from_dlpack(lse)) if from_dlpack else (o, lse)


def _backward_on_gpu(step, q, k, v, o, lse, d_o, causal, scale, dtype, deterministic, stream):
    framework = _FRAMEWORKS.get(_framework_name(q))
    if framework is not None:
        q, k, v, o, lse, d_o = (framework.lend(t) for t in (q, k, v, o, lse, d_o))
        if stream is None:
            stream = framework.stream(q)
    shape = step.check_inputs(q, k, v, stream=stream)  # the one-line errors, before anything is allocated
    tensor_dtype = _tensor_dtype(step, q, dtype, framework, stream)
    q_shape = (shape.batch, shape.heads, shape.seq_q, shape.head_dim)
    kv_shape = (shape.batch, shape.heads, shape.seq_kv, shape.head_dim)
    nbytes = step.backward_workspace_bytes(shape, deterministic)
    if framework is not None:
        dq, dk, dv = framework.empty(q_shape, q), framework.empty(kv_shape, q), framework.empty(kv_shape, q)
        workspace = framework.empty(nbytes, q, "uint8") if nbytes else None
        step.launch_backward(q, k, v, o, lse, d_o, dq, dk, dv, workspace, causal=causal, scale=scale,
                             deterministic=deterministic, stream=stream)
        return dq, dk, dv
    device = _native.device_of(q)
    dq = _native.DeviceArray(q_shape, device, tensor_dtype)
    dk = _native.DeviceArray(kv_shape, device, tensor_dtype)
    dv = _native.DeviceArray(kv_shape, device, tensor_dtype)
    workspace = _native.DeviceArray(((nbytes + 3) // 4,), device) if nbytes else None
    step.launch_backward(q, k, v, o, lse, d_o, dq, dk, dv, workspace, causal=causal, scale=scale,
                         deterministic=deterministic, stream=stream)
    _native.synchronize(stream)
    from_dlpack = _from_dlpack_of(q)
    return tuple(from_dlpack(g) for g in (dq, dk, dv)) if from_dlpack else (dq, dk, dv)


# --------------------------------------------------------------------------------------
# The steps of this build.

_STEPS = [Step(native) for native in _native.steps()]


def steps():
    """Every step built in this tree, in teaching order."""
    return list(_STEPS)


def gpu_steps():
    """The built steps that run on a GPU (empty when the build had no CUDA compiler)."""
    return [s for s in _STEPS if s.needs_gpu]


def backward_steps():
    """The built steps with a backward pass (``Step.has_backward``), in teaching order."""
    return [s for s in _STEPS if s.has_backward]


def fastest_step(head_dim, dtype, compute_capability=0, *, backward=False):
    """The last built GPU step, the fastest rung, that takes CUDA tensors of ``dtype``
    ('float32', 'bfloat16', 'float16') with this head dimension on a GPU of
    ``compute_capability`` (major*10 + minor; 0: any); with ``backward=True``, among the
    steps with a backward pass, else among the forward steps (a backward step's forward is
    an earlier step's). None when no built step does."""
    return _fastest(gpu_steps(), head_dim, dtype, compute_capability, backward)


def capable_steps(head_dim, dtype, compute_capability=0, *, backward=False):
    """The built GPU steps that take CUDA tensors of ``dtype`` with this head dimension on a GPU
    of ``compute_capability`` (as fastest_step's arguments), in teaching order: fastest_step's
    choice is the last."""
    return _capable(gpu_steps(), head_dim, dtype, compute_capability, backward)


def _capable(candidates, head_dim, dtype, compute_capability, backward):
    return [s for s in candidates
            if (s.has_backward if backward else not s.extends) and dtype in s.dtypes
            and (not s.head_dims or head_dim in s.head_dims)
            and (compute_capability == 0 or s.compute_capability in (0, compute_capability))]


def _fastest(candidates, head_dim, dtype, compute_capability, backward):
    capable = _capable(candidates, head_dim, dtype, compute_capability, backward)
    return capable[-1] if capable else None


def step(key):
    """A step by name ('step06_fa2'), short name ('step06') or number (6)."""
    if isinstance(key, Step):
        return key
    if isinstance(key, bool) or not isinstance(key, (str, int, _np.integer)):
        # True == 1 in Python: without this, step(True) would be step01.
        raise TypeError(f"a step is named by a str ('step06_fa2', 'step06') or an int (6); "
                        f"got {type(key).__name__} {key!r}")
    for s in _STEPS:
        if key in (s.name, s.short_name) or key == int(s.name[4:6]):
            return s
    built = ", ".join(s.name for s in _STEPS)
    raise KeyError(f"no step {key!r} in this build (built: {built})")


# flash_steps.step01 ... : each step under its C++ namespace's name.
for _s in _STEPS:
    globals()[_s.short_name] = _s
    __all__.append(_s.short_name)
del _s
