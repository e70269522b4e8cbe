/// \file step11_feeding_tensor_cores/test_attention.cpp
/// \brief step11's tests (GPU), in bf16 and in fp16: conformance, causal with N_q ≠ N_kv, the
/// Torch/Numba/CUDA notebook's shapes, bitwise-repeatable output, any B·H, clear errors for bad
/// input (fp32 among them), no spills. Judged by FlashAttention-2's rule in the step's precision.
#include <doctest/doctest.h>

#include "attention.hpp"
#include "common/testing.hpp"

using namespace common::testing;

namespace {
/// Options that run and judge the step in `precision`.
common::Options in(common::Precision precision) {
  common::Options options;
  options.precision = precision;
  return options;
}
const common::Options bf16 = in(common::Precision::bf16), fp16 = in(common::Precision::fp16);
}  // namespace

TEST_CASE("step11: conformance suite in bf16 (fresh random inputs, outputs poisoned)") {
  check_conformance(step11::describe(), 0, bf16);
}

TEST_CASE("step11: conformance suite in fp16 (fresh random inputs, outputs poisoned)") {
  check_conformance(step11::describe(), 0, fp16);
}

TEST_CASE("step11: causal with N_q != N_kv, across tile boundaries, every d, bf16 and fp16") {
  for (const common::Options& options : {bf16, fp16}) {
    CAPTURE(common::name(options.precision));
    check_causal_tails(step11::describe(), step11::describe().head_dims, options);
  }
}

TEST_CASE("step11: the Torch/Numba/CUDA notebook's shapes, causal and not, bf16 and fp16") {
  for (const common::Options& options : {bf16, fp16}) check_seed004_shapes(step11::describe(), options);
}

TEST_CASE("step11: one upload, timed runs, and bitwise identical outputs every run") {
  for (const common::Options& options : {bf16, fp16}) {
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      check_session(step11::describe(),
                    common::make_random_problem(common::Shape{2, 3, 777, 555, 128}, causal, std::nullopt, run_seed()),
                    3, options);
    }
  }
}

TEST_CASE("step11: B*H = 70000, more than a grid's y dimension holds, against the fp64 reference") {
  check_many_heads(step11::describe(), bf16);  // the grid is 1-D: T_r * B*H blocks
}

TEST_CASE("step11: bad input gives a clear error; fp32 is not one of its precisions") {
  check_bad_input(step11::describe(), 80, bf16);
  check_bad_input(step11::describe(), 80, fp16);
  const common::Problem p = common::make_random_problem(common::Shape{1, 1, 8, 8, 64}, false, std::nullopt, 1);
  CHECK_THROWS_WITH_AS(step11::describe().forward(p, {}), doctest::Contains("--dtype fp32 is not one of its precisions"),
                       common::InputError);
}

TEST_CASE("step11: the resource report has no spills at d = 128") { check_no_spills(step11::describe(), 128, bf16); }
