/// \file test_backward.cpp
/// \brief Tests of common/'s backward contract: the fp64 reference gradients, the gradient tolerance rule,
/// the driver's --backward.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <vector>

#include "common/backward.hpp"
#include "common/driver.hpp"
#include "common/fixtures.hpp"
#include "common/npy.hpp"
#include "common/reference.hpp"
#include "common/reference_backward.hpp"
#include "common/testing.hpp"

using namespace common;

namespace {

// loss = Σ dO ∘ O, with O from the fp64 forward reference.
double loss(const Problem& p, const std::vector<float>& d_o) {
  const Reference ref = reference_attention(p);
  double sum = 0;
  for (size_t i = 0; i < ref.o.size(); ++i) sum += double(d_o[i]) * ref.o[i];
  return sum;
}

// ∂loss/∂x for one float input x, by central differences in fp64 arithmetic on
// inputs perturbed by ±h (h a power of two, so that x ± h is exact in float for
// |x| ≤ 1: the inputs are multiples of 2^-23).
double numerical(Problem p, const std::vector<float>& d_o, std::vector<float> Problem::*tensor, size_t i) {
  const float h = std::ldexp(1.0f, -10);
  const float x = (p.*tensor)[i];
  (p.*tensor)[i] = x + h;
  const double up = loss(p, d_o);
  (p.*tensor)[i] = x - h;
  const double down = loss(p, d_o);
  return (up - down) / (2.0 * double(h));
}

// A "step" whose backward is common's fp32 standard backward, for driver tests.
StepInfo fake_backward_step() {
  StepInfo s;
  s.name = "fake_backward_step";
  s.title = "fp32 standard attention and its gradients, for driver tests";
  s.forward = [](const Problem& p, const Options&) { return standard_attention_fp32(p); };
  s.backward = [](const Problem& p, const BackwardInputs& in, const Options& o) {
    validate(p, in);
    return standard_backward_in(p, in.d_o, o.precision);
  };
  return s;
}

// A FlashAttention-2 backward in bf16 or fp16 as a tensor-core kernel computes it, emulated
// on the CPU: Q, K, V and dO rounded once; S_ij and dP_ij summed in fp32; P_ij recomputed as
// exp(scale · S_ij − L_i) from the forward's L; D_i = rowsum(dO_i ∘ O_i) from
// the forward's 16-bit O; P_ij and dS_ij rounded to 16 bits as the A operands of dV_j, dK_j and
// dQ_i's products, which accumulate in fp32; dQ, dK, dV rounded once at the end. What a 16-bit
// GPU backward step does, in another order of summation. With `low_accumulators` dK_j and dV_j
// are rounded to 16 bits after every query tile of B_r rows instead: a defect the rule must catch.
Gradients flash_backward_16bit(const Problem& problem, const BackwardInputs& in, Precision precision,
                               bool low_accumulators = false) {
  constexpr int64_t Br = 64;  // query rows between two roundings of the defective accumulators
  const Problem p = rounded_inputs(problem, precision);
  const Shape& s = p.shape;
  const int64_t d = s.head_dim;
  const std::vector<float> d_o = rounded_tensor(in.d_o, precision, s, s.seq_q, "dO");
  const auto low = [precision](float x) { return round_to(precision, x); };
  Gradients g = allocate_gradients(s);
  std::vector<float> dq(static_cast<size_t>(s.q_elements()), 0.0f), D(static_cast<size_t>(s.seq_q));
  std::vector<float> dk(static_cast<size_t>(d)), dv(static_cast<size_t>(d));
  for (int64_t bh = 0; bh < s.batch_heads(); ++bh) {
    const float* Q = p.q.data() + bh * s.seq_q * d;
    const float* K = p.k.data() + bh * s.seq_kv * d;
    const float* V = p.v.data() + bh * s.seq_kv * d;
    const float* O = in.o.data() + bh * s.seq_q * d;
    const float* L = in.lse.data() + bh * s.seq_q;
    const float* dO = d_o.data() + bh * s.seq_q * d;
    for (int64_t i = 0; i < s.seq_q; ++i) {
      float sum = 0.0f;
      for (int64_t c = 0; c < d; ++c) sum = std::fma(dO[i * d + c], O[i * d + c], sum);
      D[static_cast<size_t>(i)] = sum;
    }
    for (int64_t j = 0; j < s.seq_kv; ++j) {  // one key at a time: the rows of a K/V tile are independent
      std::fill(dk.begin(), dk.end(), 0.0f);
      std::fill(dv.begin(), dv.end(), 0.0f);
      for (int64_t i = p.causal ? j : 0; i < s.seq_q; ++i) {
        float S = 0.0f, dP = 0.0f;
        for (int64_t c = 0; c < d; ++c) {
          S = std::fma(Q[i * d + c], K[j * d + c], S);
          dP = std::fma(dO[i * d + c], V[j * d + c], dP);
        }
        const float P = std::exp(std::fma(S, p.scale, -L[i]));
        const float P16 = low(P), dS16 = low(P * (dP - D[static_cast<size_t>(i)]));
        for (int64_t c = 0; c < d; ++c) {
          dv[c] = std::fma(P16, dO[i * d + c], dv[c]);
          dk[c] = std::fma(dS16, Q[i * d + c], dk[c]);
          dq[static_cast<size_t>((bh * s.seq_q + i) * d + c)] += dS16 * K[j * d + c];
        }
        if (low_accumulators && (i + 1) % Br == 0) {
          for (int64_t c = 0; c < d; ++c) dk[c] = low(dk[c]), dv[c] = low(dv[c]);
        }
      }
      for (int64_t c = 0; c < d; ++c) {
        g.dk[static_cast<size_t>((bh * s.seq_kv + j) * d + c)] = low(p.scale * dk[c]);
        g.dv[static_cast<size_t>((bh * s.seq_kv + j) * d + c)] = low(dv[c]);
      }
    }
  }
  for (size_t e = 0; e < dq.size(); ++e) g.dq[e] = low(p.scale * dq[e]);
  return g;
}

// A 16-bit "step": standard attention's forward in the precision asked for (O rounded, L in
// fp32, as a tensor-core step returns them) and flash_backward_16bit.
StepInfo emulated_16bit_step() {
  StepInfo s;
  s.name = "emulated_16bit_backward";
  s.title = "FlashAttention-2's backward numerics in bf16 and fp16, emulated on the CPU";
  s.forward = [](const Problem& p, const Options& o) {
    return standard_attention_in(rounded_inputs(p, o.precision), o.precision);
  };
  s.backward = [](const Problem& p, const BackwardInputs& in, const Options& o) {
    validate(p, in);
    return flash_backward_16bit(p, in, o.precision);
  };
  s.head_dims = {32, 64, 96, 128};
  s.precisions = {Precision::bf16, Precision::fp16};
  return s;
}

}  // namespace

TEST_CASE("reference gradients: equal central differences of loss = sum(dO * O)") {
  // Small enough that the second-order error of the differences (h^2 ~ 1e-6 times the
  // third derivative) and their rounding (1e-16 / h ~ 1e-13) are far below 1e-5.
  for (bool causal : {false, true}) {
    for (float scale : {0.5f, -0.8f}) {
      CAPTURE(causal);
      CAPTURE(scale);
      const Problem p = make_random_problem(Shape{1, 2, 3, 4, 5}, causal, scale, 11);
      const std::vector<float> d_o = make_random_upstream(p.shape, 12);
      const ReferenceGradients ref = reference_backward(p, d_o);
      for (size_t i = 0; i < p.q.size(); ++i)
        CHECK(ref.dq[i] == doctest::Approx(numerical(p, d_o, &Problem::q, i)).epsilon(1e-5));
      for (size_t i = 0; i < p.k.size(); ++i)
        CHECK(ref.dk[i] == doctest::Approx(numerical(p, d_o, &Problem::k, i)).epsilon(1e-5));
      for (size_t i = 0; i < p.v.size(); ++i)
        CHECK(ref.dv[i] == doctest::Approx(numerical(p, d_o, &Problem::v, i)).epsilon(1e-5));
    }
  }
}

TEST_CASE("reference gradients: keys a causal query cannot see get no gradient from it") {
  // N_q = 1: query 0 sees key 0 only, so dK and dV of keys 1 and 2 are exactly 0.
  const Problem p = make_random_problem(Shape{1, 1, 1, 3, 4}, true, std::nullopt, 13);
  const ReferenceGradients ref = reference_backward(p, make_random_upstream(p.shape, 14));
  for (size_t i = 4; i < 12; ++i) {
    CHECK(ref.dk[i] == 0.0);
    CHECK(ref.dv[i] == 0.0);
  }
  // One visible key: P = 1, dS = P (dP - D) = 0, so dQ = 0 and dV = dO.
  for (size_t i = 0; i < 4; ++i) CHECK(ref.dq[i] == doctest::Approx(0.0));
}

TEST_CASE("gradient rule: standard fp32 gradients pass; perturbed, unwritten or NaN ones fail") {
  const Problem p = make_random_problem(Shape{2, 2, 100, 77, 32}, true, std::nullopt, 15);
  const std::vector<float> d_o = make_random_upstream(p.shape, 16);
  const Gradients good = standard_backward_in(p, d_o, Precision::fp32);
  CHECK(check_gradients(p, d_o, good).passed);
  for (auto field : {&Gradients::dq, &Gradients::dk, &Gradients::dv}) {
    Gradients bad = good;
    for (float& x : bad.*field) x *= 1.0001f;  // a relative error of 1e-4: a wrong tail or scale is larger
    const GradientVerdict v = check_gradients(p, d_o, bad);
    CHECK(!v.passed);
    CHECK(v.failure.find("above the tolerance") != std::string::npos);
    bad = good;
    (bad.*field)[7] = std::numeric_limits<float>::quiet_NaN();
    CHECK(!check_gradients(p, d_o, bad).passed);
    bad = good;
    (bad.*field).pop_back();
    CHECK(check_gradients(p, d_o, bad).failure == "the gradients have the wrong size");
  }
  // allocate_gradients poisons: an untouched result fails.
  CHECK(!check_gradients(p, d_o, allocate_gradients(p.shape)).passed);
}

TEST_CASE("gradient rule: 16-bit baselines pass their own precision's rule and not fp32's") {
  const Problem p = make_random_problem(Shape{1, 2, 64, 80, 64}, false, std::nullopt, 17);
  const std::vector<float> d_o = make_random_upstream(p.shape, 18);
  for (Precision precision : {Precision::bf16, Precision::fp16}) {
    CAPTURE(name(precision));
    const Problem rounded = rounded_inputs(p, precision);
    const std::vector<float> d_o16 = rounded_tensor(d_o, precision, p.shape, p.shape.seq_q, "dO");
    const Gradients low = standard_backward_in(rounded, d_o16, precision);
    CHECK(check_gradients(p, d_o, low, precision).passed);
    CHECK(!check_gradients(rounded, d_o16, low, Precision::fp32).passed);
  }
}

TEST_CASE("gradient rule: a 16-bit FlashAttention backward passes the gradient suite") {
  // The rule a tensor-core backward step is held to, tried on its numerics first: P_ij
  // recomputed from L, D_i from the forward's 16-bit O, dP_ij unrounded, dS_ij rounded once.
  // Up to N = 257 (with N = 1000, minutes instead of seconds); the next test takes N_q = 4096.
  const StepInfo step = emulated_16bit_step();
  for (Precision precision : {Precision::bf16, Precision::fp16}) {
    CAPTURE(name(precision));
    Options options;
    options.precision = precision;
    testing::check_gradient_conformance(step, 257, options, true);
  }
}

TEST_CASE("gradient rule: over N_q = 4096 rows, 16-bit accumulators of dK and dV fail it") {
  // dK_j and dV_j rounded to 16 bits after every 64 query rows, a defect a tensor-core
  // kernel can have: 64 roundings of 2^-9 (bf16) or 2^-12 (fp16) relative each where the
  // honest kernel has one, at the end; their sum grows as √64 = 8 roundings' worth, beyond
  // the 2× of the rule (15 roundings, at N_q = 1000, pass it on some inputs).
  const StepInfo step = emulated_16bit_step();
  for (Precision precision : {Precision::bf16, Precision::fp16}) {
    for (bool causal : {false, true}) {
      CAPTURE(name(precision));
      CAPTURE(causal);
      Options options;
      options.precision = precision;
      const Problem p = make_random_problem(Shape{1, 2, 4096, 64, 64}, causal, std::nullopt, testing::run_seed());
      const std::vector<float> d_o = make_random_upstream(p.shape, testing::run_seed() + 1);
      const Result forward = step.forward(p, options);
      const BackwardInputs in{forward.o, forward.lse, d_o};
      const GradientVerdict honest = check_gradients(p, d_o, flash_backward_16bit(p, in, precision), precision);
      CHECK_MESSAGE(honest.passed, honest.failure);
      // Judged with the O it was given too, as the suites judge a step: still a failure.
      for (const std::vector<float>* o : {static_cast<const std::vector<float>*>(nullptr), &in.o}) {
        const GradientVerdict defect =
            check_gradients(p, d_o, flash_backward_16bit(p, in, precision, true), precision, o);
        CHECK(!defect.passed);
        CHECK(defect.failure.find("above the tolerance") != std::string::npos);
      }
    }
  }
}

TEST_CASE("gradient rule: the O a backward is given enters the 16-bit baseline, and only there") {
  // Scores of size 10³: dP_ij − D_i cancels, so D_i = dO_i · O_i carries O's own error. Given
  // 16-bit standard attention's O, the baseline stays about what it was; given an O off by a
  // few 16-bit roundings, as a 16-bit forward's may be within its rule, it grows; in fp32 the
  // O given changes nothing.
  for (Precision precision : {Precision::bf16, Precision::fp16}) {
    CAPTURE(name(precision));
    const Problem raw = make_random_problem(Shape{1, 2, 100, 100, 64}, false, std::nullopt, 23);
    Problem p = raw;
    for (float& x : p.q) x *= 12.0f;  // |s| of size 10³
    for (float& x : p.k) x *= 12.0f;
    const Problem r = rounded_inputs(p, precision);
    const std::vector<float> d_o =
        rounded_tensor(make_random_upstream(p.shape, 24), precision, p.shape, p.shape.seq_q, "dO");
    const ReferenceGradients ref = reference_backward(r, d_o);
    const Result standard = standard_attention_in(r, precision);
    const GradientErrors alone = baseline_gradient_errors(r, d_o, ref, precision);
    const GradientErrors same = baseline_gradient_errors(r, d_o, ref, precision, &standard.o);
    CHECK(same.dq >= alone.dq);  // the worst of the formulations: never less
    std::vector<float> off = standard.o;
    for (size_t e = 0; e < off.size(); ++e)
      off[e] = round_to(precision, off[e] * (1.0f + 4 * unit_roundoff(precision)));
    const GradientErrors given = baseline_gradient_errors(r, d_o, ref, precision, &off);
    CHECK(given.dq > alone.dq);
    CHECK(given.dq > same.dq);
    const ReferenceGradients ref32 = reference_backward(p, make_random_upstream(p.shape, 24));
    CHECK(baseline_gradient_errors(p, make_random_upstream(p.shape, 24), ref32, Precision::fp32, &off).dq ==
          baseline_gradient_errors(p, make_random_upstream(p.shape, 24), ref32, Precision::fp32).dq);
  }
}

TEST_CASE("gradient rule: the floor is 1e-6 at scores of size 1 and grows with max |S|") {
  const Problem small = make_random_problem(Shape{1, 1, 50, 50, 64}, false, std::nullopt, 19);
  const std::vector<float> d_o = make_random_upstream(small.shape, 20);
  const ReferenceGradients ref = reference_backward(small, d_o);
  const GradientTolerance zero_baseline = gradient_tolerance_from(GradientErrors{}, ref, Precision::fp32);
  CHECK(zero_baseline.dq == kToleranceFloor);
  CHECK(zero_baseline.dv == kToleranceFloor);
  const float amplitude = amplitude_for_score_magnitude(1e3, 64, small.scale);
  const Problem large = make_random_problem(small.shape, false, std::nullopt, 19, amplitude);
  const ReferenceGradients large_ref = reference_backward(large, d_o);
  CHECK(large_ref.max_abs_s > 300);
  const GradientTolerance t = gradient_tolerance_from(GradientErrors{}, large_ref, Precision::fp32);
  CHECK(large_ref.max_abs_s_terms >= large_ref.max_abs_s);
  CHECK(t.dv == doctest::Approx(std::ldexp(1.0, -25) * large_ref.max_abs_s_terms * large_ref.magnitude_dv));
}

TEST_CASE("backward inputs: wrong lengths and non-finite O, L or dO are refused, naming the tensor") {
  const Problem p = make_random_problem(Shape{1, 2, 5, 4, 3}, false, std::nullopt, 21);
  const Result r = standard_attention_fp32(p);
  const BackwardInputs good{r.o, r.lse, make_random_upstream(p.shape, 22)};
  CHECK_NOTHROW(validate(p, good));
  BackwardInputs in = good;
  in.d_o.resize(7);
  CHECK_THROWS_WITH_AS(validate(p, in), "dO has 7 elements but the shape needs 30", InputError);
  in = good;
  in.lse[9] = -std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH_AS(validate(p, in), doctest::Contains("L holds -inf at [b=0, h=1, n=4"), InputError);
  in = good;
  in.o[0] = std::nanf("");
  CHECK_THROWS_WITH_AS(validate(p, in), doctest::Contains("O holds nan"), InputError);
}

TEST_CASE("upstream: the same seed gives the same dO, independent of Q") {
  const Shape s{1, 2, 3, 4, 5};
  CHECK(make_random_upstream(s, 1) == make_random_upstream(s, 1));
  CHECK(make_random_upstream(s, 1) != make_random_upstream(s, 2));
  CHECK(make_random_upstream(s, 1) != make_random_problem(s, false, std::nullopt, 1).q);
}

TEST_CASE("flops: the backward counts 2.5 x the forward's, halved when causal") {
  const Shape s{2, 3, 100, 200, 64};
  CHECK(attention_backward_flops(s, false) == 2.5 * attention_flops(s, false));
  CHECK(attention_backward_flops(s, true) == 2.5 * attention_flops(s, false) / 2);
}

TEST_CASE("driver: --backward is offered only by steps that have one; --check judges all five outputs") {
  std::string out, err;
  StepInfo forward_only = fake_backward_step();
  forward_only.backward = nullptr;
  CHECK(testing::run_program_captured(forward_only, {"--backward"}, &out, &err) == 2);
  CHECK(err.find("--backward") != std::string::npos);
  CHECK(testing::run_program_captured(
            fake_backward_step(),
            {"--backward", "--check", "--json", "--seq-q", "9", "--seq-kv", "7", "--head-dim", "8"}, &out, &err) == 0);
  CHECK(out.find("\"backward\":{") != std::string::npos);
  CHECK(out.find("\"max_err_dk\"") != std::string::npos);
  CHECK(out.find("\"passed\":true") != out.rfind("\"passed\":true"));  // the forward's and the backward's
  // A backward that is wrong fails the check with exit code 1.
  StepInfo wrong = fake_backward_step();
  wrong.backward = [](const Problem& p, const BackwardInputs& in, const Options& o) {
    Gradients g = standard_backward_in(p, in.d_o, o.precision);
    g.dv.back() += 1e-3f;
    return g;
  };
  CHECK(testing::run_program_captured(wrong, {"--backward", "--check"}, &out, &err) == 1);
  CHECK(out.find("FAIL: max |dV - dV_ref|") != std::string::npos);
}
