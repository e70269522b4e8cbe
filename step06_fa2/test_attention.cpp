/// \file step06_fa2/test_attention.cpp
/// \brief step06's tests (GPU): conformance, causal with N_q ≠ N_kv, the Torch/Numba/CUDA notebook's shapes,
/// bitwise-repeatable output, any B·H, clear errors for bad input, no spills.
#include <doctest/doctest.h>

#include "attention.hpp"
#include "common/testing.hpp"

using namespace common::testing;

TEST_CASE("step06: conformance suite (fresh random inputs, outputs poisoned)") { check_conformance(step06::describe()); }

TEST_CASE("step06: causal with N_q != N_kv, across tile boundaries, every d") {
  check_causal_tails(step06::describe(), step06::describe().head_dims);
}

TEST_CASE("step06: the Torch/Numba/CUDA notebook's shapes, causal and not") { check_seed004_shapes(step06::describe()); }

TEST_CASE("step06: one upload, timed runs, and bitwise identical outputs every run") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    check_session(step06::describe(),
                  common::make_random_problem(common::Shape{2, 3, 777, 555, 128}, causal, std::nullopt, run_seed()));
  }
}

TEST_CASE("step06: B*H = 70000, more than a grid's y dimension holds, against the fp64 reference") {
  check_many_heads(step06::describe());  // the grid is 1-D: T_r * B*H blocks
}

TEST_CASE("step06: bad input gives a clear error") { check_bad_input(step06::describe(), 80); }

TEST_CASE("step06: the resource report has no spills at d = 128") { check_no_spills(step06::describe(), 128); }
