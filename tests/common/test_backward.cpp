/// \file test_backward.cpp
/// \brief Tests of common/'s backward contract: the fp64 reference gradients, the gradient tolerance rule,
/// the driver's --backward.
#include <doctest/doctest.h>

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
