/// \file step21_tiles_by_head_dim/test_attention.cpp
/// \brief step21's own GPU test: repeatability at its other block shapes, d = 64, 96 and 256. The tests
/// every CUDA step runs (common/cuda/test_gpu_steps.cpp) cover the rest, d = 128's repeatability among them.
#include <doctest/doctest.h>

#include "attention.hpp"
#include "common/testing.hpp"

using namespace common::testing;

TEST_CASE("step21: one upload, timed runs, and bitwise identical outputs every run at d = 64, 96 and 256") {
  // Three consumer warpgroups at d = 64; two from d = 96 on, with 128-column rows at d = 96 and
  // B_c = 64 at d = 256 (d = 128 is the suite's repeatability test).
  for (int64_t d : {64, 96, 256}) {
    for (common::Precision precision : {common::Precision::bf16, common::Precision::fp16}) {
      common::Options options;
      options.precision = precision;
      for (bool causal : {false, true}) {
        CAPTURE(d);
        CAPTURE(common::name(precision));
        CAPTURE(causal);
        check_session(step21::describe(),
                      common::make_random_problem(common::Shape{2, 3, 777, 555, d}, causal, std::nullopt, run_seed()),
                      3, options);
      }
    }
  }
}
