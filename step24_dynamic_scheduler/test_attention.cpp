/// \file step24_dynamic_scheduler/test_attention.cpp
/// \brief step24's own GPU tests: bitwise identical outputs run after run at every head dimension,
/// whichever block the scheduler gives a tile to, and more tiles than blocks. The tests every CUDA
/// step runs (common/cuda/test_gpu_steps.cpp) cover the rest.
#include <doctest/doctest.h>

#include "attention.hpp"
#include "common/testing.hpp"

using namespace common::testing;

TEST_CASE("step24: one upload, timed runs, and bitwise identical outputs every run at d = 64, 96 and 256") {
  // Causal tiles go to whichever block claims them first: O and L must not depend on which.
  for (int64_t d : {64, 96, 256}) {
    for (common::Precision precision : {common::Precision::bf16, common::Precision::fp16}) {
      common::Options options;
      options.precision = precision;
      for (bool causal : {false, true}) {
        CAPTURE(d);
        CAPTURE(common::name(precision));
        CAPTURE(causal);
        check_session(step24::describe(),
                      common::make_random_problem(common::Shape{2, 3, 777, 555, d}, causal, std::nullopt, run_seed()),
                      3, options);
      }
    }
  }
}

TEST_CASE("step24: more tiles than blocks, each block looping over several") {
  // B·H = 40 heads of 9 query tiles at d = 128: 360 tiles for 132 blocks (an H100's), 2 or 3 a block.
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    common::Options options;
    options.precision = common::Precision::bf16;
    check_problem(step24::describe(),
                  common::make_random_problem(common::Shape{2, 20, 1100, 160, 128}, causal, std::nullopt, run_seed()),
                  options);
  }
}
