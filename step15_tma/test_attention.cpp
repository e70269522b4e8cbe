/// \file step15_tma/test_attention.cpp
/// \brief step15's tests (Hopper GPU; skipped on any other), in bf16 and in fp16: conformance, causal with N_q ≠ N_kv, the
/// Torch/Numba/CUDA notebook's shapes, bitwise-repeatable output, any B·H, clear errors for bad
/// input (fp32 among them), every sign of the scale, no spills at any d. Judged by FlashAttention-2's rule in the step's precision.
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

TEST_CASE("step15: conformance suite in bf16 (fresh random inputs, outputs poisoned)") {
  check_conformance(step15::describe(), 0, bf16);
}

TEST_CASE("step15: conformance suite in fp16 (fresh random inputs, outputs poisoned)") {
  check_conformance(step15::describe(), 0, fp16);
}

TEST_CASE("step15: causal with N_q != N_kv, across tile boundaries, every d, bf16 and fp16") {
  for (const common::Options& options : {bf16, fp16}) {
    CAPTURE(common::name(options.precision));
    check_causal_tails(step15::describe(), step15::describe().head_dims, options);
  }
}

TEST_CASE("step15: the Torch/Numba/CUDA notebook's shapes, causal and not, bf16 and fp16") {
  for (const common::Options& options : {bf16, fp16}) check_seed004_shapes(step15::describe(), options);
}

TEST_CASE("step15: one upload, timed runs, and bitwise identical outputs every run") {
  for (const common::Options& options : {bf16, fp16}) {
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      check_session(step15::describe(),
                    common::make_random_problem(common::Shape{2, 3, 777, 555, 128}, causal, std::nullopt, run_seed()),
                    3, options);
    }
  }
}

TEST_CASE("step15: B*H = 70000, more than a grid's y dimension holds, against the fp64 reference") {
  check_many_heads(step15::describe(), bf16);  // the grid is 1-D: T_r * B*H blocks
}

TEST_CASE("step15: bad input gives a clear error; fp32 is not one of its precisions") {
  check_bad_input(step15::describe(), 80, bf16);
  check_bad_input(step15::describe(), 80, fp16);
  const common::Problem p = common::make_random_problem(common::Shape{1, 1, 8, 8, 64}, false, std::nullopt, 1);
  CHECK_THROWS_WITH_AS(step15::describe().forward(p, {}), doctest::Contains("--dtype fp32 is not one of its precisions"),
                       common::InputError);
}

TEST_CASE("step15: any scale, at every d: a negative or zero scale goes into Q_i, causal and not, tails") {
  // The kernel folds sign(scale) into its tile of Q_i and exponentiates |scale|·S_ij: each
  // sign, every d, lengths that end inside a tile, both precisions.
  for (const common::Options& options : {bf16, fp16}) {
    for (int64_t d : step15::describe().head_dims) {
      for (float scale : {-1.3f, -0.05f, 0.0f, 2.0f}) {
        for (bool causal : {false, true}) {
          CAPTURE(d);
          CAPTURE(scale);
          CAPTURE(causal);
          check_problem(step15::describe(),
                        common::make_random_problem(common::Shape{2, 1, 150, 77, d}, causal, scale, run_seed()), options);
        }
      }
    }
  }
}

TEST_CASE("step15: the resource report has no spills at any d, bf16 and fp16") {
  for (int64_t d : step15::describe().head_dims) {
    CAPTURE(d);
    check_no_spills(step15::describe(), d, bf16);
    check_no_spills(step15::describe(), d, fp16);
  }
}
