/// \file step05_cuda_registers/test_attention.cpp
/// \brief step05's GPU tests (and its spilling build): conformance, the Torch/Numba/CUDA notebook's shapes, > 48 KB of shared memory,
/// any B·H, bad input, repeatability.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "attention.hpp"
#include "common/testing.hpp"

using namespace common::testing;

TEST_CASE("step05: conformance suite (fresh random inputs, poisoned outputs)") {
  check_conformance(step05::describe());
}

TEST_CASE("step05: the Torch/Numba/CUDA notebook's shapes, causal and not") { check_seed004_shapes(step05::describe()); }

TEST_CASE("step05: shapes that need more than 48 KB of shared memory (d >= 64), and every d") {
  for (int64_t d : step05::describe().head_dims) {
    CAPTURE(d);
    const common::Problem p =
        common::make_random_problem(common::Shape{1, 3, 300, 200, d}, d == 64, std::nullopt, run_seed());
    CHECK((extra(step05::attention_forward(p), "smem_bytes") > 48 * 1024) == (d >= 64));
    check_problem(step05::describe(), p);
  }
}

TEST_CASE("step05: B*H = 70000 (one block per head: a 1-D grid holds 2^31 - 1)") {
  check_many_heads(step05::describe());
}

TEST_CASE("step05: bad input is refused with a one-line InputError") { check_bad_input(step05::describe(), 48); }

TEST_CASE("step05: one upload, timed runs, and the same output every run") {
  check_session(step05::describe(),
                common::make_random_problem(common::Shape{2, 2, 333, 517, 128}, true, std::nullopt, run_seed()));
}

TEST_CASE("step05: the spilling build (32 registers a thread) passes the conformance suite up to N = 257") {
  check_conformance(step05_spill::describe(), 257);
}

TEST_CASE("step05: the spilling build computes the same function") {
  const common::Problem p =
      common::make_random_problem(common::Shape{1, 2, 200, 300, 96}, true, std::nullopt, run_seed());
  check_problem(step05_spill::describe(), p);
  const common::Result a = step05::attention_forward(p);
  const common::Result b = step05_spill::attention_forward(p);
  double max_diff = 0;
  for (size_t e = 0; e < a.o.size(); ++e) max_diff = std::max(max_diff, double(std::abs(a.o[e] - b.o[e])));
  CHECK(max_diff < 1e-5);
}
