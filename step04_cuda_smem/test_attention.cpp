/// \file step04_cuda_smem/test_attention.cpp
/// \brief step04's own GPU test: more than 48 KB of shared memory at every d. The tests every CUDA step
/// runs (conformance, the Torch/Numba/CUDA notebook's shapes, any B·H, bad input, repeatability) are
/// common/cuda/test_gpu_steps.cpp's.
#include <doctest/doctest.h>

#include "attention.hpp"
#include "common/testing.hpp"

using namespace common::testing;

TEST_CASE("step04: every head dimension needs more than 48 KB of shared memory, and runs") {
  check_smem_over_48kb(step04::describe(), 0);
}
