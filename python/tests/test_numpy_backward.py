"""The backward steps called from NumPy, judged by the C++ tests' gradient rule.

The rule (common::check_gradients, bound as flash_steps.check_gradients): a step's max
error on each of dQ, dK and dV against the fp64 gradients is at most twice that of
standard attention's gradients in the same precision on the same inputs, plus a floor.
The fp64 gradients (flash_steps.reference_backward) recompute the forward from Q, K, V
with plain loops; they never see the step's O or L. Every step with a backward runs here
(a GPU step through its backward session, so on a machine without a GPU only the CPU
ones do).
"""
import numpy as np
import pytest

import flash_steps
from conftest import SEED, random_qkv

RUNNABLE = [s for s in flash_steps.backward_steps() if not s.needs_gpu or flash_steps.gpu_available()]
FORWARD_ONLY = [s for s in flash_steps.steps() if not s.has_backward and not s.needs_gpu]

# (B, H, N_q, N_kv, d, causal, scale or None, magnitude of Q and K)
CASES = [
    (1, 1, 2, 2, 1, False, None, 1.0),
    (2, 3, 17, 33, 8, True, None, 1.0),
    (1, 2, 33, 17, 32, True, None, 1.0),
    (1, 2, 100, 31, 64, False, 0.3, 1.0),
    (2, 1, 31, 100, 32, False, -0.5, 1.0),
    (1, 1, 16, 16, 32, True, 0.0, 1.0),
    (1, 1, 64, 64, 32, True, None, 30.0),  # scores of size 1e3: no overflow
]


def case_id(case):
    b, h, n_q, n_kv, d, causal, scale, magnitude = case
    return f"B{b}H{h}_Nq{n_q}_Nkv{n_kv}_d{d}{'_causal' if causal else ''}" + (
        "" if scale is None else f"_scale{scale}") + (f"_x{magnitude:g}" if magnitude != 1 else "")


def supported(step, d):
    return not step.head_dims or d in step.head_dims


def test_the_build_has_the_cpu_backward_step():
    names = [s.name for s in flash_steps.backward_steps()]
    assert "step25_backward_cpu" in names, names
    assert flash_steps.step25.extends == "step02_tiled_cpu"
    assert not flash_steps.step25.has_deterministic_option  # its dQ is summed in one order always
    assert not flash_steps.step02.has_backward and flash_steps.step02.extends == ""


@pytest.mark.parametrize("step", RUNNABLE, ids=lambda s: s.name)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_backward_matches_the_fp64_gradients(step, case, rng):
    b, h, n_q, n_kv, d, causal, scale, magnitude = case
    if not supported(step, d):
        pytest.skip(f"{step.name} is built for d in {step.head_dims}, not {d}")
    q, k, v = random_qkv(rng, b, h, n_q, n_kv, d, magnitude)
    d_o = rng.standard_normal((b, h, n_q, d)).astype(np.float32)
    o, lse = step.attention_forward(q, k, v, causal=causal, scale=scale)
    dq, dk, dv = step.attention_backward(q, k, v, o, lse, d_o, causal=causal, scale=scale)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert dq.dtype == dk.dtype == dv.dtype == np.float32
    # Judged in the precision the step computed in (its own: attention_backward's default).
    verdict = flash_steps.check_gradients(q, k, v, d_o, dq, dk, dv, causal=causal, scale=scale,
                                          dtype=step.precisions[0])
    assert verdict.passed, f"{verdict!r} (FLASH_TEST_SEED={SEED})"


def test_the_reference_gradients_agree_with_finite_differences(rng):
    # The reference itself, judged independently: a central difference of
    # loss = sum(O * dO) in float64 NumPy attention, for a few elements of Q, K and V.
    q, k, v = (x.astype(np.float64) for x in random_qkv(rng, 1, 1, 5, 7, 3))
    d_o = rng.standard_normal((1, 1, 5, 3))
    scale = 0.7

    def loss(q, k, v):
        s = scale * q[0, 0] @ k[0, 0].T
        s[np.triu_indices(5, 1, 7)] = -np.inf  # causal, top-left aligned
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        return float(np.sum((p @ v[0, 0]) * d_o[0, 0]))

    grads = flash_steps.reference_backward(*(x.astype(np.float32) for x in (q, k, v, d_o)), causal=True,
                                           scale=scale)
    inputs = [q.astype(np.float32).astype(np.float64), k.astype(np.float32).astype(np.float64),
              v.astype(np.float32).astype(np.float64)]
    eps = 1e-6
    for which, grad in enumerate(grads):
        assert grad.dtype == np.float64 and grad.shape == inputs[which].shape
        for index in [(0, 0, 0, 0), (0, 0, 3, 2), (0, 0, 4, 1)]:
            plus = [x.copy() for x in inputs]
            minus = [x.copy() for x in inputs]
            plus[which][index] += eps
            minus[which][index] -= eps
            numeric = (loss(*plus) - loss(*minus)) / (2 * eps)
            assert abs(grad[index] - numeric) < 1e-6, (which, index, grad[index], numeric)


def test_the_hand_worked_example():
    # The FlashAttention-1 notebook's example, N=2, d=1, Q=[1,1], K=[0,2], V=[0,-1], with
    # dO = [1, 1]: P = softmax([0, 2]) = [0.119, 0.881] in both rows, O = -0.881.
    # dV = P^T dO = [0.238, 1.762]; dP = dO V^T = [0, -1]; D = dO . O = -0.881;
    # dS = P (dP - D) = [0.105, -0.105]; dQ = dS K = -0.210 (scale 1); dK = dS^T Q = [0.210, -0.210].
    q = np.array([1, 1], np.float32).reshape(1, 1, 2, 1)
    k = np.array([0, 2], np.float32).reshape(1, 1, 2, 1)
    v = np.array([0, -1], np.float32).reshape(1, 1, 2, 1)
    d_o = np.ones((1, 1, 2, 1), np.float32)
    step = flash_steps.step25
    o, lse = step.attention_forward(q, k, v)
    dq, dk, dv = step.attention_backward(q, k, v, o, lse, d_o)
    np.testing.assert_allclose(dq.ravel(), [-0.210, -0.210], atol=0.001)
    np.testing.assert_allclose(dk.ravel(), [0.210, -0.210], atol=0.001)
    np.testing.assert_allclose(dv.ravel(), [0.238, 1.762], atol=0.001)


def test_a_wrong_gradient_fails_the_rule(rng):
    # The rule can fail: one element of dK off by 1e-3 (a tail-tile bug's size) is caught.
    q, k, v = random_qkv(rng, 1, 2, 33, 17, 16)
    d_o = rng.standard_normal(q.shape).astype(np.float32)
    o, lse = flash_steps.step25.attention_forward(q, k, v)
    dq, dk, dv = flash_steps.step25.attention_backward(q, k, v, o, lse, d_o)
    assert flash_steps.check_gradients(q, k, v, d_o, dq, dk, dv)
    dk[0, 1, 16, 3] += 1e-3
    verdict = flash_steps.check_gradients(q, k, v, d_o, dq, dk, dv)
    assert not verdict.passed and "dK" in verdict.failure, repr(verdict)
    assert verdict.max_err_dk > verdict.tolerance_dk
    dk[0, 1, 16, 3] = np.nan
    assert not flash_steps.check_gradients(q, k, v, d_o, dq, dk, dv).passed


def test_the_gradients_of_a_step_are_those_of_its_own_forward(rng):
    # O and L matter: the backward recomputes P from L, so a wrong L gives wrong gradients.
    q, k, v = random_qkv(rng, 1, 1, 9, 9, 4)
    d_o = rng.standard_normal(q.shape).astype(np.float32)
    o, lse = flash_steps.step25.attention_forward(q, k, v)
    grads = flash_steps.step25.attention_backward(q, k, v, o, lse + np.float32(0.5), d_o)
    assert not flash_steps.check_gradients(q, k, v, d_o, *grads).passed


@pytest.mark.parametrize("step", RUNNABLE, ids=lambda s: s.name)
def test_deterministic_is_accepted_where_the_step_offers_it(step, rng):
    d = step.head_dims[0] if step.head_dims else 8
    q, k, v = random_qkv(rng, 1, 2, 40, 24, d)
    d_o = rng.standard_normal(q.shape).astype(np.float32)
    o, lse = step.attention_forward(q, k, v, causal=True)
    if not step.has_deterministic_option:
        with pytest.raises(flash_steps.InputError,
                           match=rf"^{step.name} sums dQ (in one fixed order always; deterministic=True is for"
                                 rf"|by atomicAdd only; it has no deterministic mode)"):
            step.attention_backward(q, k, v, o, lse, d_o, causal=True, deterministic=True)
        return
    first = step.attention_backward(q, k, v, o, lse, d_o, causal=True, deterministic=True)
    second = step.attention_backward(q, k, v, o, lse, d_o, causal=True, deterministic=True)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)  # bitwise the same
    assert flash_steps.check_gradients(q, k, v, d_o, *first, causal=True, dtype=step.precisions[0])


@pytest.mark.parametrize("step", FORWARD_ONLY, ids=lambda s: s.name)
def test_a_step_without_a_backward_refuses(step, rng):
    q, k, v = random_qkv(rng, 1, 1, 4, 4, 8)
    o, lse = step.attention_forward(q, k, v)
    with pytest.raises(flash_steps.InputError,
                       match=rf"^{step.name} has no backward pass; the built steps with one: .*step25_backward_cpu"):
        step.attention_backward(q, k, v, o, lse, o)
