"""Bad input raises ValueError, TypeError or RuntimeError with the steps' one-line message.

Nothing a caller passes may crash the interpreter or return a silently wrong answer.
Errors of the C++ steps map to Python exceptions: common::InputError is
flash_steps.InputError (a ValueError), common::NoGpuError is flash_steps.NoGpuError (a
RuntimeError); a wrong type or dtype is a TypeError.
"""
import numpy as np
import pytest

import flash_steps
from conftest import random_qkv

CPU_STEPS = [s for s in flash_steps.steps() if not s.needs_gpu]


@pytest.fixture
def qkv(rng):
    return random_qkv(rng, 1, 2, 5, 7, 8)


def test_the_errors_are_the_standard_ones():
    assert issubclass(flash_steps.InputError, ValueError)
    assert issubclass(flash_steps.NoGpuError, RuntimeError)


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
def test_wrong_types_and_dtypes_are_type_errors(step, qkv):
    q, k, v = qkv
    with pytest.raises(TypeError, match=r"^q must be a numpy.ndarray of float32, shaped \[B, H, N, d\]; got list$"):
        step.attention_forward(q.tolist(), k, v)
    with pytest.raises(TypeError, match=r"^k must be float32; got float64 \(convert it with .astype\(numpy.float32\)\)$"):
        step.attention_forward(q, k.astype(np.float64), v)
    with pytest.raises(TypeError, match="v must be float32; got float16"):
        step.attention_forward(q, k, v.astype(np.float16))
    with pytest.raises(TypeError, match="v must be float32; got int32"):
        step.attention_forward(q, k, v.astype(np.int32))
    with pytest.raises(TypeError):  # a scale that is not a number: pybind11's argument check
        step.attention_forward(q, k, v, scale="big")


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
def test_wrong_shapes_are_value_errors_naming_the_tensor(step, qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"^q: expected 4 dimensions \[B, H, N, d\], got 3 \[2, 5, 8\]$"):
        step.attention_forward(q[0], k, v)
    with pytest.raises(ValueError, match=r"^k and v must have the same shape \(got \[1, 2, 7, 8\] and \[1, 2, 6, 8\]\)$"):
        step.attention_forward(q, k, v[:, :, :6])
    with pytest.raises(ValueError, match=r"^q and k must agree in B, H and d \(got \[1, 2, 5, 8\] and \[1, 2, 7, 4\]\)$"):
        step.attention_forward(q, k[..., :4], v[..., :4])
    with pytest.raises(flash_steps.InputError, match=r"^seq_q must be >= 1 \(got 0\)$"):
        step.attention_forward(q[:, :, :0], k, v)
    with pytest.raises(ValueError, match="head_dim must be >= 1"):
        step.attention_forward(q[..., :0], k[..., :0], v[..., :0])


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
def test_sizes_past_the_index_type_are_refused_before_anything_is_copied(step):
    # 2^31 elements that take no memory (stride 0): refused from the shape alone.
    one = np.zeros(1, np.float32)
    huge = np.lib.stride_tricks.as_strided(one, shape=(1, 1, 2**25, 64), strides=(0, 0, 0, 0))
    small = np.zeros((1, 1, 4, 64), np.float32)
    with pytest.raises(ValueError, match=r"^Q would have more than 2\^31-1 elements; use smaller sizes$"):
        step.attention_forward(huge, small, small)


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
def test_nan_and_infinity_in_an_input_are_refused_naming_the_element(step, qkv):
    q, k, v = qkv
    q = q.copy()
    q[0, 1, 2, 3] = np.nan
    with pytest.raises(ValueError, match=r"^q holds nan at \[b=0, h=1, n=2, c=3\]; inputs must be finite numbers$"):
        step.attention_forward(q, k, v)
    v = v.copy()
    v[0, 0, 6, 7] = -np.inf
    with pytest.raises(ValueError, match=r"v holds -inf at \[b=0, h=0, n=6, c=7\]"):
        step.attention_forward(qkv[0], k, v)


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
def test_a_precision_the_step_does_not_compute_in_is_refused_with_the_programs_message(step, qkv):
    for dtype in ("bf16", "fp16"):
        with pytest.raises(flash_steps.InputError,
                           match=rf"^{step.name} computes in fp32 only; --dtype {dtype} is not one of its precisions$"):
            step.attention_forward(*qkv, dtype=dtype)
    with pytest.raises(ValueError, match=r"^--dtype: 'float16' is not a precision \(fp32, bf16 or fp16\)$"):
        step.attention_forward(*qkv, dtype="float16")


@pytest.mark.parametrize("step", [s for s in flash_steps.gpu_steps() if "fp32" not in s.precisions],
                         ids=lambda s: s.name)
def test_a_bf16_step_refuses_fp32_before_looking_for_a_gpu(step, qkv):
    # The precision is checked first, so a machine without a GPU gives the same message.
    with pytest.raises(flash_steps.InputError,
                       match=rf"^{step.name} computes in bf16, fp16; --dtype fp32 is not one of its precisions$"):
        step.attention_forward(*qkv, dtype="fp32")
    assert step.dtypes == ["bfloat16", "float16"] and step.precisions == ["bf16", "fp16"]


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
def test_a_scale_that_is_not_finite_is_refused(step, qkv):
    for scale in (float("inf"), float("nan"), 1e300):
        with pytest.raises(ValueError, match="^scale must be a finite number"):
            step.attention_forward(*qkv, scale=scale)
    with pytest.raises(ValueError, match="sram_floats must be >= 0"):
        step.attention_forward(*qkv, sram_floats=-1)


def test_a_cpu_step_refuses_tensors_that_are_not_numpy_arrays(qkv):
    class Lent:  # an object of another framework, that speaks DLPack
        def __dlpack__(self, stream=None):
            raise AssertionError("a CPU step must not take it")

        def __dlpack_device__(self):
            return (1, 0)

    q, k, v = qkv
    with pytest.raises(TypeError, match=r"q must be a numpy.ndarray .*; got .*Lent"):
        flash_steps.step01.attention_forward(Lent(), k, v)


@pytest.mark.skipif(flash_steps.gpu_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("step", flash_steps.gpu_steps(), ids=lambda s: s.name)
def test_a_gpu_step_without_a_gpu_says_so(step, qkv):
    d = min(step.head_dims) if step.head_dims else 32  # a d it compiles (the Hopper steps: 64 and 128)
    q, k, v = random_qkv(np.random.default_rng(0), 1, 1, 4, 4, d)
    with pytest.raises(flash_steps.NoGpuError, match=rf"^{step.name} needs an NVIDIA GPU: "):
        step.attention_forward(q, k, v)
    with pytest.raises(RuntimeError, match=rf"^{step.name} needs an NVIDIA GPU: "):
        step.launch(q, k, v, np.empty_like(q), np.empty(q.shape[:3], np.float32))
    for dtype in step.precisions:  # every precision it computes in reaches the GPU check
        with pytest.raises(flash_steps.NoGpuError, match=rf"^{step.name} needs an NVIDIA GPU: "):
            step.attention_forward(q, k, v, dtype=dtype)


def test_the_interpreter_survives_every_bad_call(qkv):
    # After all of the above, a good call still works and still passes.
    q, k, v = qkv
    o, lse = flash_steps.step02.attention_forward(q, k, v, causal=True)
    assert flash_steps.check_result(q, k, v, o, lse, causal=True).passed
