"""Bad input raises ValueError, TypeError or RuntimeError with the steps' one-line message.

Nothing a caller passes may crash the interpreter or return a silently wrong answer.
Errors of the C++ steps map to Python exceptions: common::InputError is
flash_steps.InputError (a ValueError), common::NoGpuError is flash_steps.NoGpuError (a
RuntimeError); a wrong type or dtype is a TypeError.
"""
import re
import warnings

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
@pytest.mark.parametrize("keyword, value, message", [
    ("scale", "0.5", r"scale must be a number \(a float\) or None for 1/sqrt\(d\); got str '0.5'"),
    ("scale", True, r"scale must be a number \(a float\) or None for 1/sqrt\(d\); got bool True"),
    ("scale", [0.5], r"scale must be a number \(a float\) or None for 1/sqrt\(d\); got list \[0.5\]"),
    ("causal", "yes", r"causal must be True or False; got str 'yes'"),
    ("causal", None, r"causal must be True or False; got NoneType None"),
    ("causal", 1, r"causal must be True or False; got int 1"),
    ("sram_floats", None, r"sram_floats must be an int \(0: the step's default\); got NoneType None"),
    ("sram_floats", 4096.0, r"sram_floats must be an int \(0: the step's default\); got float 4096.0"),
    ("sram_floats", False, r"sram_floats must be an int \(0: the step's default\); got bool False"),
    ("dtype", 32, r"dtype must be 'fp32', 'bf16', 'fp16' or None \(the step's own\); got int 32"),
    ("dtype", np.float32, r"dtype must be 'fp32', 'bf16', 'fp16' or None \(the step's own\); got type <class 'numpy.float32'>"),
])
def test_a_keyword_of_the_wrong_type_is_a_one_line_type_error_naming_it(step, qkv, keyword, value, message):
    # pybind11's own answer is "incompatible function arguments" and the whole
    # signature, 4 to 840 lines; this names the argument and what it takes.
    with pytest.raises(TypeError) as raised:
        step.attention_forward(*qkv, **{keyword: value})
    assert "\n" not in str(raised.value)
    assert raised.match("^" + message + "$")


def test_the_reference_and_the_check_take_the_same_keywords_alike(qkv):
    q, k, v = qkv
    with pytest.raises(TypeError, match=r"^causal must be True or False; got str 'no'$"):
        flash_steps.reference_attention(q, k, v, causal="no")
    with pytest.raises(TypeError, match=r"^scale must be a number .*; got str '1'$"):
        flash_steps.check_result(q, k, v, q, q[..., 0], scale="1")


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
def test_numbers_of_the_right_kind_are_taken(step, qkv):
    # NumPy's scalars and bools are numbers and bools too; an int scale is a number.
    expected, _ = step.attention_forward(*qkv, causal=True, scale=0.5)
    for causal, scale in ((np.bool_(True), np.float32(0.5)), (True, np.float64(0.5))):
        o, _ = step.attention_forward(*qkv, causal=causal, scale=scale)
        np.testing.assert_array_equal(o, expected)
    o, _ = step.attention_forward(*qkv, scale=1)
    np.testing.assert_array_equal(o, step.attention_forward(*qkv, scale=1.0)[0])
    if step.uses_sram_budget:
        step.attention_forward(*qkv, sram_floats=np.int64(64))


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
def test_a_scale_that_is_not_finite_is_refused_in_a_short_message(step, qkv):
    for scale, shown in ((float("inf"), "inf"), (float("nan"), "nan"), (1e300, "1e+300"), (-3.5e38, "-3.5e+38"),
                         (10**400, "inf")):
        with pytest.raises(ValueError) as raised:
            step.attention_forward(*qkv, scale=scale)
        assert str(raised.value) == ("scale must be a finite number within float32's range, |scale| <= 3.4e+38 "
                                     f"(got {shown})")


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
def test_sram_floats_out_of_the_programs_range_is_refused(step, qkv):
    # The programs' --sram-floats takes [1, 2^30]; 0 here is the step's default.
    for value, shown in ((-1, "-1"), (2**30 + 1, "1073741825"), (2**63 - 1, "9223372036854775807"),
                         (2**64, "18446744073709551616"), (10**30, "an int of 31 digits")):
        with pytest.raises(flash_steps.InputError) as raised:
            step.attention_forward(*qkv, sram_floats=value)
        assert str(raised.value) == f"sram_floats needs an integer in [1, 1073741824] (0: the step's default), got {shown}"
    step.attention_forward(*qkv, sram_floats=2**30)  # the largest the programs take runs


def test_a_step_is_named_by_a_str_or_an_int_never_a_bool():
    assert flash_steps.step(1) is flash_steps.step01 and flash_steps.step("step02") is flash_steps.step02
    for key in (True, False, 1.0, None):
        with pytest.raises(TypeError, match=r"^a step is named by a str \('step06_fa2', 'step06'\) or an int \(6\); got "):
            flash_steps.step(key)
    with pytest.raises(KeyError, match="no step 99 in this build"):
        flash_steps.step(99)


def test_pytorch_layer_states_its_minimum_version_on_import(monkeypatch):
    # An old torch is refused on import with an ImportError saying which version is needed,
    # not an AttributeError from deep inside the registration. A stand-in module plays torch.
    import sys
    import types

    fake = types.ModuleType("torch")
    fake.__version__ = "2.3.1+cu121"
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.delitem(sys.modules, "flash_steps.pytorch", raising=False)
    with pytest.raises(ImportError) as raised:
        import flash_steps.pytorch  # noqa: F401
    assert str(raised.value) == ("flash_steps.pytorch needs PyTorch >= 2.4 (torch.library.custom_op); "
                                 "this is torch 2.3.1+cu121")
    monkeypatch.delitem(sys.modules, "flash_steps.pytorch", raising=False)
    fake.__version__ = "1.13.0"
    with pytest.raises(ImportError, match="needs PyTorch >= 2.4"):
        import flash_steps.pytorch  # noqa: F401,F811


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


# ---------------------------------------------------------------------------------------
# Memory: checked before anything is copied, as the programs check it; strided inputs
# copied once; an allocation that fails is a MemoryError, never a crash.


def run_python(code):
    """Runs `code` in a fresh interpreter with this one's flash_steps; returns (exit code, output)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


# Sets the address-space limit to what the interpreter maps now plus `headroom` bytes.
LIMIT_MEMORY = """
import resource
def limit_memory(headroom):
    with open("/proc/self/status") as status:
        vm = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + headroom, vm + headroom))
    return vm
"""


def test_step01s_score_matrix_is_refused_up_front_as_the_programs_refuse_it():
    # N = 2^20, d = 1: Q, K and V take 4 MiB but S takes 4 TiB; the programs refuse it
    # before allocating (common::require_host_memory), and so does the module.
    q = np.ones((1, 1, 2**20, 1), np.float32)
    with pytest.raises(flash_steps.InputError,
                       match=r"^this problem needs about 4\.0 TiB of host memory and [0-9.]+ [KMGT]iB is available; "
                             r"use smaller sizes$"):
        flash_steps.step01.attention_forward(q, q, q)


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
def test_inputs_larger_than_the_memory_are_refused_before_they_are_copied(step):
    # A 4 GiB view of one float (stride 0) under an address-space limit of 1 GiB more than
    # the interpreter maps: refused from the sizes, with the programs' message; the
    # reference and the check are refused alike.
    code = LIMIT_MEMORY + f"""
import numpy as np, flash_steps
limit_memory(2**30)
one = np.ones(1, np.float32)
huge = np.lib.stride_tricks.as_strided(one, shape=(1, 1, 2**24, 64), strides=(0, 0, 0, 0))
small = np.ones((1, 1, 4, 64), np.float32)
for call in (lambda: flash_steps.{step.short_name}.attention_forward(huge, small, small),
             lambda: flash_steps.reference_attention(huge, small, small),
             lambda: flash_steps.check_result(huge, small, small, huge, huge[..., 0])):
    try:
        call()
        print("accepted")
    except flash_steps.InputError as error:
        print(error)
"""
    status, output = run_python(code)
    assert status == 0, output
    lines = output.splitlines()
    assert len(lines) == 3, output
    for line in lines:
        assert re.fullmatch(r"this problem needs about [0-9.]+ GiB of host memory and [0-9.]+ GiB is available; "
                            r"use smaller sizes", line), output


def test_a_strided_input_that_cannot_be_copied_is_a_memory_error_not_a_crash():
    # Sizes that pass the memory check (it counts the machine's memory, not what is
    # free), while the copy of a non-contiguous q cannot be allocated: MemoryError.
    code = LIMIT_MEMORY + """
import numpy as np, flash_steps
ballast = np.empty(2**27, np.float32)  # 512 MiB of address space, never touched: mapped, not free
headroom = 64 * 2**20
vm = limit_memory(headroom)
n = int((vm + headroom) / 8.2) // 64 * 64      # the check counts about 8 bytes per element of q
assert 4 * n > 2 * headroom                    # q's copy needs more than is left
one = np.ones(1, np.float32)
q = np.lib.stride_tricks.as_strided(one, shape=(1, 1, n // 64, 64), strides=(0, 0, 0, 0))
small = np.ones((1, 1, 4, 64), np.float32)
try:
    flash_steps.step02.attention_forward(q, small, small)
    print("accepted")
except MemoryError:
    print("MemoryError")
"""
    status, output = run_python(code)
    assert status == 0 and output.strip() == "MemoryError", f"exit {status}: {output}"


def test_a_strided_view_is_copied_once_not_twice(rng):
    # NumPy's allocations are traced by tracemalloc; the step's copy of its inputs
    # (std::vector) is not. A transposed view must be read in place: no contiguous
    # NumPy copy of it first (docs/python.md: "a transposed view costs nothing more").
    import tracemalloc

    x = rng.standard_normal((1, 512, 4, 64)).astype(np.float32)  # [B, N, H, d], 512 KiB
    q = x.transpose(0, 2, 1, 3)  # [B, H, N, d], not contiguous
    assert not q.flags.c_contiguous
    small = np.ascontiguousarray(q[:, :, :8])
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        flash_steps.step02.attention_forward(q, small, small)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert peak < q.nbytes / 4, f"{peak} bytes allocated by NumPy during the call (q is {q.nbytes})"


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
def test_views_of_any_strides_give_their_contiguous_copys_answer(step, rng):
    x = rng.standard_normal((2, 9, 3, 16)).astype(np.float32)
    views = {
        "transposed": x.transpose(0, 2, 1, 3),
        "reversed": x.transpose(0, 2, 1, 3)[:, ::-1, ::-1],
        "every other d": rng.standard_normal((2, 3, 9, 32)).astype(np.float32)[..., ::2],
        "broadcast": np.broadcast_to(x[:1, :1, :1, :], (2, 3, 9, 16)),
        "unaligned": np.frombuffer(b"\0" + x.tobytes(), np.float32, count=x.size, offset=1).reshape(2, 3, 9, 16),
    }
    k, v = (rng.standard_normal((2, 3, 5, 16)).astype(np.float32) for _ in range(2))
    for name, q in views.items():
        o, lse = step.attention_forward(q, k, v, causal=True)
        o_c, lse_c = step.attention_forward(np.ascontiguousarray(q), k, v, causal=True)
        np.testing.assert_array_equal(o, o_c, err_msg=name)
        np.testing.assert_array_equal(lse, lse_c, err_msg=name)


# ---------------------------------------------------------------------------------------
# Finite inputs that overflow float32 inside a step: the programs warn, so does the module.

OVERFLOW = r"^{name}: (\d+) of {total} outputs are not finite: these inputs overflow float32 inside the step " \
           r"\(scores scale\*q\.k or sums of V beyond 3\.4e38\)$"


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
@pytest.mark.parametrize("how", ["q and k of 1e30", "scale 3e38"])
def test_outputs_that_overflow_are_never_returned_silently(step, qkv, how):
    q, k, v = qkv
    if how == "q and k of 1e30":
        q, k, scale = np.full_like(q, 1e30), np.full_like(k, 1e30), None
    else:
        q, k, scale = np.abs(q) + 1, np.abs(k) + 1, 3e38  # every score beyond 3.4e38
    total = q.size + q.size // q.shape[-1]
    with pytest.warns(RuntimeWarning) as warned:
        o, lse = step.attention_forward(q, k, v, scale=scale)
    assert len(warned) == 1
    found = re.match(OVERFLOW.format(name=step.name, total=total), str(warned[0].message))
    assert found, str(warned[0].message)
    nonfinite = int(np.count_nonzero(~np.isfinite(o)) + np.count_nonzero(~np.isfinite(lse)))
    assert int(found.group(1)) == nonfinite > 0
    # Where warnings are errors, it raises.
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(RuntimeWarning, match=OVERFLOW.format(name=step.name, total=total)):
            step.attention_forward(q, k, v, scale=scale)


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
def test_large_scores_that_do_not_overflow_give_no_warning(step, rng):
    q, k, v = random_qkv(rng, 1, 2, 17, 17, 32, magnitude=30.0)  # |s| ~ 1e3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        o, lse = step.attention_forward(q, k, v, scale=1e3)
    assert np.isfinite(o).all() and np.isfinite(lse).all()


# --------------------------------------------------------------------------------------
# The backward pass on NumPy arrays: the same checks, and O, L and dO checked as well.

BACKWARD_CPU_STEPS = [s for s in CPU_STEPS if s.has_backward]


@pytest.fixture
def backward_inputs(qkv, rng):
    q, k, v = qkv
    o, lse = flash_steps.step25.attention_forward(q, k, v)
    d_o = rng.standard_normal(q.shape).astype(np.float32)
    return q, k, v, o, lse, d_o


@pytest.mark.parametrize("step", BACKWARD_CPU_STEPS, ids=lambda s: s.name)
def test_backward_wrong_types_are_type_errors(step, backward_inputs):
    q, k, v, o, lse, d_o = backward_inputs
    with pytest.raises(TypeError, match=r"^q must be a numpy.ndarray of float32, shaped \[B, H, N, d\]; got list$"):
        step.attention_backward(q.tolist(), k, v, o, lse, d_o)
    with pytest.raises(TypeError, match=r"^d_o must be float32; got float64 \(convert it"):
        step.attention_backward(q, k, v, o, lse, d_o.astype(np.float64))
    with pytest.raises(TypeError, match=r"^lse must be a numpy.ndarray of float32"):
        step.attention_backward(q, k, v, o, None, d_o)
    with pytest.raises(TypeError, match=r"^deterministic must be True or False; got str 'yes'$"):
        step.attention_backward(q, k, v, o, lse, d_o, deterministic="yes")
    with pytest.raises(TypeError, match=r"^causal must be True or False; got int 1$"):
        step.attention_backward(q, k, v, o, lse, d_o, causal=1)


@pytest.mark.parametrize("step", BACKWARD_CPU_STEPS, ids=lambda s: s.name)
def test_backward_wrong_shapes_are_value_errors_naming_the_tensor(step, backward_inputs):
    q, k, v, o, lse, d_o = backward_inputs
    with pytest.raises(ValueError, match=r"^k and v must have the same shape"):
        step.attention_backward(q, k, v[:, :, :6], o, lse, d_o)
    with pytest.raises(flash_steps.InputError, match=r"^o must have shape \[1, 2, 5, 8\] for these inputs$"):
        step.attention_backward(q, k, v, o[:, :, :4], lse, d_o)
    with pytest.raises(flash_steps.InputError, match=r"^lse must have shape \[1, 2, 5\] for these inputs$"):
        step.attention_backward(q, k, v, o, lse[..., None], d_o)
    with pytest.raises(flash_steps.InputError, match=r"^d_o must have shape \[1, 2, 5, 8\] for these inputs$"):
        step.attention_backward(q, k, v, o, lse, d_o[..., :4])


@pytest.mark.parametrize("step", BACKWARD_CPU_STEPS, ids=lambda s: s.name)
@pytest.mark.parametrize("name", ["q", "o", "lse", "d_o"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_backward_non_finite_inputs_are_value_errors_naming_the_element(step, backward_inputs, name, bad):
    args = dict(zip(["q", "k", "v", "o", "lse", "d_o"], (x.copy() for x in backward_inputs)))
    index = (0, 1, 3) if name == "lse" else (0, 1, 3, 2)
    args[name][index] = bad
    where = r"\[b=0, h=1, n=3, c=0\]" if name == "lse" else r"\[b=0, h=1, n=3, c=2\]"
    with pytest.raises(flash_steps.InputError, match=rf"^{name} holds {'nan' if np.isnan(bad) else 'inf'} at {where}"):
        step.attention_backward(**args)


@pytest.mark.parametrize("step", BACKWARD_CPU_STEPS, ids=lambda s: s.name)
def test_backward_inputs_larger_than_the_memory_are_refused_before_they_are_copied(step):
    # As for the forward: a 4 GiB view of one float under an address-space limit of 1 GiB
    # more than the interpreter maps, refused by the programs' check for --backward (which
    # also counts dO and the gradients); the fp64 gradients and their check alike.
    code = LIMIT_MEMORY + f"""
import numpy as np, flash_steps
limit_memory(2**30)
one = np.ones(1, np.float32)
huge = np.lib.stride_tricks.as_strided(one, shape=(1, 1, 2**24, 64), strides=(0, 0, 0, 0))
small = np.ones((1, 1, 4, 64), np.float32)
for call in (lambda: flash_steps.{step.short_name}.attention_backward(huge, small, small, huge, huge[..., 0], huge),
             lambda: flash_steps.reference_backward(huge, small, small, huge),
             lambda: flash_steps.check_gradients(huge, small, small, huge, huge, small, small)):
    try:
        call()
        print("accepted")
    except flash_steps.InputError as error:
        print(error)
"""
    status, output = run_python(code)
    assert status == 0, output
    lines = output.splitlines()
    assert len(lines) == 3, output
    for line in lines:
        assert re.fullmatch(r"this problem needs about [0-9.]+ GiB of host memory and [0-9.]+ GiB is available; "
                            r"use smaller sizes", line), output


def test_reference_and_check_gradients_take_the_same_checks(backward_inputs):
    q, k, v, o, lse, d_o = backward_inputs
    with pytest.raises(flash_steps.InputError, match=r"^d_o must have shape \[1, 2, 5, 8\] for these inputs$"):
        flash_steps.reference_backward(q, k, v, d_o[:, :1])
    with pytest.raises(flash_steps.InputError, match=r"^d_o holds nan at \[b=0, h=0, n=0, c=0\]"):
        flash_steps.reference_backward(q, k, v, np.full_like(d_o, np.nan))
    dq, dk, dv = flash_steps.step25.attention_backward(q, k, v, o, lse, d_o)
    with pytest.raises(flash_steps.InputError, match=r"^dk must have shape \[1, 2, 7, 8\] for these inputs$"):
        flash_steps.check_gradients(q, k, v, d_o, dq, dq, dv)
    with pytest.raises(TypeError, match=r"^dv must be float32; got float64"):
        flash_steps.check_gradients(q, k, v, d_o, dq, dk, dv.astype(np.float64))
    with pytest.raises(ValueError, match=r"fp64"):
        flash_steps.check_gradients(q, k, v, d_o, dq, dk, dv, dtype="fp64")
