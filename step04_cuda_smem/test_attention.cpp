/// \file step04_cuda_smem/test_attention.cpp
/// \brief step04's GPU tests: conformance, the Torch/Numba/CUDA notebook's shapes, > 48 KB of shared memory, any B·H, bad input,
/// repeatability.
#include <doctest/doctest.h>

#include "attention.hpp"
#include "common/testing.hpp"

using namespace common::testing;

TEST_CASE("step04: conformance suite (fresh random inputs, poisoned outputs)") { check_conformance(step04::describe()); }

TEST_CASE("step04: the Torch/Numba/CUDA notebook's shapes, causal and not") { check_seed004_shapes(step04::describe()); }

TEST_CASE("step04: every head dimension needs more than 48 KB of shared memory, and runs") {
  for (int64_t d : step04::describe().head_dims) {
    CAPTURE(d);
    const common::Problem p =
        common::make_random_problem(common::Shape{1, 3, 300, 200, d}, d == 64, std::nullopt, run_seed());
    CHECK(extra(step04::attention_forward(p), "smem_bytes") > 48 * 1024);
    check_problem(step04::describe(), p);
  }
}

TEST_CASE("step04: B*H = 70000 (one block per head: a 1-D grid holds 2^31 - 1)") {
  check_many_heads(step04::describe());
}

TEST_CASE("step04: bad input is refused with a one-line InputError") { check_bad_input(step04::describe(), 48); }

TEST_CASE("step04: one upload, timed runs, and the same output every run") {
  check_session(step04::describe(),
                common::make_random_problem(common::Shape{2, 2, 333, 517, 128}, true, std::nullopt, run_seed()));
}
