"""Every CPU step called from NumPy, judged by the C++ tests' rule (common::check_result).

The tolerance rule: a step's max error against the fp64 reference is at most twice the
max error of fp32 standard attention on the same inputs, plus 1e-6. check_result is
the C++ function itself, so Python and C++ judge a step alike. Also the logic that picks
the default GPU step (on a made-up ladder) and the switch of the host timing, which need no GPU.
"""
import types

import numpy as np
import pytest

import flash_steps
from conftest import SEED, random_qkv

CPU_STEPS = [s for s in flash_steps.steps() if not s.needs_gpu]

# (B, H, N_q, N_kv, d, causal, scale or None, magnitude of Q and K)
CASES = [
    (1, 1, 1, 1, 1, False, None, 1.0),
    (1, 1, 2, 2, 1, True, None, 1.0),
    (2, 3, 17, 33, 8, True, None, 1.0),
    (1, 2, 33, 17, 8, True, None, 1.0),
    (1, 2, 100, 31, 64, False, 0.3, 1.0),
    (1, 1, 16, 16, 80, True, None, 1.0),
    (2, 1, 31, 100, 32, False, -0.5, 1.0),
    (1, 1, 64, 64, 32, True, None, 30.0),  # scores of size 1e3: no overflow
]


def case_id(case):
    b, h, n_q, n_kv, d, causal, scale, magnitude = case
    return f"B{b}H{h}_Nq{n_q}_Nkv{n_kv}_d{d}{'_causal' if causal else ''}" + (
        f"_scale{scale}" if scale else "") + (f"_x{magnitude:g}" if magnitude != 1 else "")


def test_the_build_has_cpu_steps():
    # Steps 1-3 and the CPU backward step (23), in ladder order.
    assert [s.short_name for s in CPU_STEPS] == ["step01", "step02", "step03", "step25"][: len(CPU_STEPS)]
    assert CPU_STEPS, "steps 1-3 are always built"


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_cpu_step_matches_the_fp64_reference(step, case, rng):
    b, h, n_q, n_kv, d, causal, scale, magnitude = case
    q, k, v = random_qkv(rng, b, h, n_q, n_kv, d, magnitude)
    o, lse = step.attention_forward(q, k, v, causal=causal, scale=scale)
    assert o.shape == (b, h, n_q, d) and lse.shape == (b, h, n_q)
    assert o.dtype == np.float32 and lse.dtype == np.float32
    verdict = flash_steps.check_result(q, k, v, o, lse, causal=causal, scale=scale)
    assert verdict.passed, f"{verdict!r} (FLASH_TEST_SEED={SEED})"


def test_the_hand_worked_example_gives_minus_0_88():
    # The FlashAttention-1 notebook's example: N=2, d=1, Q=[1,1], K=[0,2], V=[0,-1] -> O=[-0.88, -0.88].
    q = np.array([1, 1], np.float32).reshape(1, 1, 2, 1)
    k = np.array([0, 2], np.float32).reshape(1, 1, 2, 1)
    v = np.array([0, -1], np.float32).reshape(1, 1, 2, 1)
    for step in CPU_STEPS:
        o, _ = step.attention_forward(q, k, v)
        np.testing.assert_allclose(o.ravel(), [-0.88, -0.88], rtol=0, atol=0.005, err_msg=step.name)


def test_the_reference_is_standard_attention_in_fp64(rng):
    q, k, v = random_qkv(rng, 2, 2, 9, 13, 8)
    o, lse = flash_steps.reference_attention(q, k, v, causal=True, scale=0.7)
    assert o.dtype == np.float64 and lse.dtype == np.float64
    scale = float(np.float32(0.7))  # the problem holds the scale as float32, as the steps use it
    s = scale * np.einsum("bhqc,bhkc->bhqk", q.astype(np.float64), k.astype(np.float64))
    s[..., np.triu(np.ones((9, 13), bool), 1)] = -np.inf  # top-left: query i sees keys j <= i
    expected_lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    p = np.exp(s - expected_lse[..., None])
    np.testing.assert_allclose(lse, expected_lse, rtol=0, atol=1e-12)
    np.testing.assert_allclose(o, p @ v.astype(np.float64), rtol=0, atol=1e-12)


def test_check_result_fails_a_wrong_answer(rng):
    q, k, v = random_qkv(rng, 1, 2, 20, 20, 16)
    o, lse = flash_steps.step01.attention_forward(q, k, v)
    assert flash_steps.check_result(q, k, v, o, lse)
    o[0, 1, 19, 3] += 1e-3  # a tail-tile bug's size of error
    verdict = flash_steps.check_result(q, k, v, o, lse)
    assert not verdict and verdict.max_err_o > verdict.tolerance_o
    o[0, 1, 19, 3] = np.nan  # an unwritten element
    assert not flash_steps.check_result(q, k, v, o, lse).passed


def test_non_contiguous_arrays_are_copied_not_refused(rng):
    # A [B, N, H, d] array seen as [B, H, N, d]: the layout attention layers produce.
    q_bnhd = rng.standard_normal((2, 19, 3, 8)).astype(np.float32)
    q = q_bnhd.transpose(0, 2, 1, 3)
    assert not q.flags.c_contiguous
    k = rng.standard_normal((2, 3, 23, 8)).astype(np.float32)[:, :, ::-1]  # negative strides too
    v = np.asfortranarray(rng.standard_normal((2, 3, 23, 8)).astype(np.float32))
    contiguous = [np.ascontiguousarray(x) for x in (q, k, v)]
    for step in CPU_STEPS:
        o, lse = step.attention_forward(q, k, v, causal=True)
        assert flash_steps.check_result(*contiguous, o, lse, causal=True).passed, step.name
        # The same numbers as from contiguous copies (to rounding: steps 1 and 2 vectorise
        # with Eigen, whose sums may round differently for data at another alignment).
        o_c, lse_c = step.attention_forward(*contiguous, causal=True)
        np.testing.assert_allclose(o, o_c, rtol=0, atol=1e-6, err_msg=step.name)
        np.testing.assert_allclose(lse, lse_c, rtol=0, atol=1e-6, err_msg=step.name)


def test_inputs_are_not_modified_and_outputs_are_fresh_arrays(rng):
    q, k, v = random_qkv(rng, 1, 1, 8, 8, 4)
    before = [x.copy() for x in (q, k, v)]
    o, lse = flash_steps.step02.attention_forward(q, k, v)
    for x, y in zip((q, k, v), before):
        np.testing.assert_array_equal(x, y)
    assert o.flags.c_contiguous and o.flags.writeable and not o.flags.owndata  # the capsule owns it
    o2, _ = flash_steps.step02.attention_forward(q, k, v)
    assert not np.shares_memory(o, o2)


def test_step02_takes_the_sram_budget(rng):
    # The FlashAttention-1 notebook's 2x2 case broke a first attempt at M = 9: tiles of one row.
    q, k, v = random_qkv(rng, 1, 2, 37, 29, 8)
    for m in (9, 64, 4096):
        o, lse = flash_steps.step02.attention_forward(q, k, v, causal=True, sram_floats=m)
        assert flash_steps.check_result(q, k, v, o, lse, causal=True).passed, f"M={m}"


def test_steps_are_found_by_name_short_name_and_number():
    assert flash_steps.step("step02_tiled_cpu") is flash_steps.step02
    assert flash_steps.step("step02") is flash_steps.step02
    assert flash_steps.step(2) is flash_steps.step02
    assert flash_steps.step02.title and flash_steps.step02.dtypes == ["float32"]
    for s in flash_steps.steps():  # the precisions it computes in, its own first; a dtype for each
        assert s.precisions and set(s.precisions) <= {"fp32", "bf16", "fp16"}
        assert s.dtypes == [{"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[p] for p in s.precisions]
    assert all(s.precisions == ["fp32"] for s in CPU_STEPS)
    assert flash_steps.step01.head_dims == []  # any d
    for s in flash_steps.gpu_steps():
        assert s.head_dims and s.needs_gpu
    with pytest.raises(KeyError, match="no step 'step99'"):
        flash_steps.step("step99")


def test_shapes_are_validated_and_gpu_steps_say_what_workspace_they_need():
    shape = flash_steps.Shape(batch=2, heads=3, seq_q=100, seq_kv=50, head_dim=64)
    assert (shape.batch, shape.heads, shape.seq_q, shape.seq_kv, shape.head_dim) == (2, 3, 100, 50, 64)
    with pytest.raises(ValueError, match=r"heads must be >= 1 \(got 0\)"):
        flash_steps.Shape(2, 0, 100, 50, 64)
    assert flash_steps.step02.workspace_bytes(shape) == 0  # a CPU step launches nothing
    # Steps 4 and 5 keep l and m in global memory, with or without the mask; step 24's
    # dynamic scheduler (causal only) counts claimed tiles in one int, and so does step 33's
    # forward, which is step 24's.
    extra = {"step04": 2 * 2 * 3 * 100 * 4, "step05": 2 * 2 * 3 * 100 * 4}
    causal_extra = dict(extra, step24=4, step33=4)
    for s in flash_steps.gpu_steps():
        assert s.workspace_bytes(shape) == extra.get(s.short_name, 0), s.name
        assert s.workspace_bytes(shape, causal=False) == extra.get(s.short_name, 0), s.name
        assert s.workspace_bytes(shape, causal=True) == causal_extra.get(s.short_name, 0), s.name


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
def test_dtype_names_the_precision_and_fp32_is_a_cpu_steps_own(step, rng):
    q, k, v = random_qkv(rng, 1, 2, 17, 9, 8)
    o, lse = step.attention_forward(q, k, v, causal=True)
    o32, lse32 = step.attention_forward(q, k, v, causal=True, dtype="fp32")
    assert o32.dtype == lse32.dtype == np.float32
    for out, out_lse in ((o, lse), (o32, lse32)):  # None means the step's own: fp32
        assert flash_steps.check_result(q, k, v, out, out_lse, causal=True).passed


def needed_libraries(path):
    """The DT_NEEDED entries of a 64-bit little-endian ELF shared object."""
    import struct

    data = open(path, "rb").read()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, f"{path}: not a 64-bit little-endian ELF"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 6:  # SHT_DYNAMIC
            continue
        strtab = sections[link][4]
        for at in range(offset, offset + size, entsize):
            tag, value = struct.unpack_from("<qQ", data, at)
            if tag == 1:  # DT_NEEDED
                names.append(data[strtab + value:data.index(b"\0", strtab + value)].decode())
    return names


def test_the_module_shares_the_interpreters_cpp_runtime():
    """The compiled module loads the shared libstdc++ rather than carrying a copy of its own:
    two C++ runtimes in one process (one in the module, one loaded by PyTorch) crash at the
    first number formatted into a message (python/CMakeLists.txt)."""
    import flash_steps._native as native

    needed = needed_libraries(native.__file__)
    assert any(name.startswith("libstdc++.so") for name in needed), (
        f"{native.__file__} needs {needed}: libstdc++ linked statically")


@pytest.mark.parametrize("step", CPU_STEPS, ids=lambda s: s.name)
def test_a_steps_output_is_a_function_of_its_inputs(step, rng):
    # The same inputs give the same bits: on repeated calls, with the heap in another
    # state each time (buffers of odd sizes kept alive in between), and from another
    # thread, whose allocations come from another malloc arena. Sizes that are not
    # multiples of a vector's width, so that where a vectorised loop starts matters.
    import threading

    q, k, v = random_qkv(rng, 2, 2, 37, 45, 40)
    expected_o, expected_lse = step.attention_forward(q, k, v, causal=True, scale=0.3)
    kept = []
    for size in range(1, 12):
        kept.append(np.empty(size * 37 + 3, np.uint8))  # moves the next allocations
        o, lse = step.attention_forward(q, k, v, causal=True, scale=0.3)
        kept.append((o, lse))
        assert o.tobytes() == expected_o.tobytes() and lse.tobytes() == expected_lse.tobytes(), f"call {size}"
    answers = []
    worker = threading.Thread(target=lambda: answers.append(step.attention_forward(q, k, v, causal=True, scale=0.3)))
    worker.start()
    worker.join()
    o, lse = answers[0]
    assert o.tobytes() == expected_o.tobytes() and lse.tobytes() == expected_lse.tobytes(), "a worker thread"


def fake_step(name, dtypes, head_dims, compute_capability=0, extends="", has_backward=False):
    """What fastest_step reads of a Step, for a ladder this build may not have."""
    return types.SimpleNamespace(name=name, dtypes=dtypes, head_dims=head_dims, compute_capability=compute_capability,
                                 extends=extends, has_backward=has_backward)


#: A ladder like the full build's: fp32 steps, 16-bit steps for any GPU, Hopper steps for two d,
#: and a backward step that extends an fp32 one.
LADDER = [
    fake_step("step08_fa2_pipelined", ["float32"], [32, 64, 96, 128]),
    fake_step("step14_block_order", ["bfloat16", "float16"], [32, 64, 96, 128]),
    fake_step("step21_tiles_by_head_dim", ["bfloat16", "float16"], [64, 128], compute_capability=90),
    fake_step("step29_backward_deterministic", ["float32"], [32, 64, 96, 128], extends="step08_fa2_pipelined",
              has_backward=True),
]


@pytest.mark.parametrize("case", [
    # (head_dim, dtype, compute capability, backward) -> the step chosen
    ((64, "bfloat16", 90, False), "step21_tiles_by_head_dim"),  # the last rung where it fits
    ((128, "float16", 90, False), "step21_tiles_by_head_dim"),
    ((96, "bfloat16", 90, False), "step14_block_order"),  # d the Hopper step was not compiled for
    ((64, "bfloat16", 80, False), "step14_block_order"),  # not a Hopper GPU
    ((64, "bfloat16", 0, False), "step21_tiles_by_head_dim"),  # GPU unknown: any
    ((64, "float32", 90, False), "step08_fa2_pipelined"),  # never a backward step for a forward
    ((64, "float32", 90, True), "step29_backward_deterministic"),
    ((64, "bfloat16", 90, True), None),  # no 16-bit backward step
    ((48, "bfloat16", 90, False), None),  # no step compiled for d = 48
    ((64, "float64", 90, False), None),
], ids=lambda c: "-".join(map(str, c[0])) if isinstance(c[0], tuple) else str(c))
def test_the_default_falls_back_to_the_fastest_step_that_takes_the_dtype_and_d(case):
    (head_dim, dtype, capability, backward), expected = case
    chosen = flash_steps._fastest(LADDER, head_dim, dtype, capability, backward)
    assert (chosen.name if chosen else None) == expected


def test_capable_steps_keep_the_ladder_order_and_end_with_the_fastest():
    capable = flash_steps._capable(LADDER, 64, "bfloat16", 90, False)
    assert [s.name for s in capable] == ["step14_block_order", "step21_tiles_by_head_dim"]
    assert flash_steps._capable(LADDER, 64, "float32", 90, True) == [LADDER[3]]
    assert flash_steps._capable(LADDER, 48, "bfloat16", 90, False) == []
    built = flash_steps.capable_steps(64, "float32")  # this build's: fastest_step is the last of them
    assert (built[-1] if built else None) is flash_steps.fastest_step(64, "float32")


def test_fastest_step_looks_only_at_the_gpu_steps_of_this_build():
    chosen = flash_steps.fastest_step(64, "float32")
    expected = [s for s in flash_steps.gpu_steps() if not s.extends and "float32" in s.dtypes]
    assert chosen is (expected[-1] if expected else None)


def test_host_timing_is_off_until_asked_and_reports_by_phase():
    flash_steps._native.host_times()  # empties the totals
    flash_steps._native.host_timing(True)
    flash_steps._native.host_timing(False)
    assert flash_steps._native.host_times() == {}  # no launch was made: nothing timed
