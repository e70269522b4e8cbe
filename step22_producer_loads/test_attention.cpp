/// \file step22_producer_loads/test_attention.cpp
/// \brief step22's own GPU test: bitwise identical outputs run after run at d = 64, 96 and 256, with a
/// negative scale, whose sign the consumers now fold into Q_i among themselves. The tests every CUDA
/// step runs (common/cuda/test_gpu_steps.cpp) cover the rest.
#include <doctest/doctest.h>

#include "attention.hpp"
#include "common/testing.hpp"

using namespace common::testing;

TEST_CASE("step22: one upload, timed runs, and bitwise identical outputs every run, negative scale too") {
  // The producer issues every load and leaves; the consumers meet at their own named barrier
  // once Q_i's signs are in. O and L must not depend on how the two roles' work interleaves.
  for (int64_t d : {64, 96, 256}) {
    for (common::Precision precision : {common::Precision::bf16, common::Precision::fp16}) {
      common::Options options;
      options.precision = precision;
      for (bool causal : {false, true}) {
        CAPTURE(d);
        CAPTURE(common::name(precision));
        CAPTURE(causal);
        check_session(step22::describe(),
                      common::make_random_problem(common::Shape{2, 3, 777, 555, d}, causal, -0.3, run_seed()), 3,
                      options);
      }
    }
  }
}
