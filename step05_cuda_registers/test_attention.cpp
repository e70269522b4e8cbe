/// \file step05_cuda_registers/test_attention.cpp
/// \brief step05's own GPU tests: more than 48 KB of shared memory from d = 64 on, and the spilling
/// build. The tests every CUDA step runs (conformance, the Torch/Numba/CUDA notebook's shapes, any B·H,
/// bad input, repeatability) are common/cuda/test_gpu_steps.cpp's.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "attention.hpp"
#include "common/testing.hpp"

using namespace common::testing;

TEST_CASE("step05: shapes that need more than 48 KB of shared memory (d >= 64), and every d") {
  check_smem_over_48kb(step05::describe(), 64);
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
