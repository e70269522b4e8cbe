/// \file test_cuda_helpers.cpp
/// \brief Tests of the CUDA helpers that need no GPU: they run on every machine, CI included.
#include <doctest/doctest.h>

#include "common/cuda/cuda_check.cuh"

TEST_CASE("cuda helpers: a problem larger than the free device memory is refused") {
  // Every valid shape fits an 80 GB GPU (each tensor < 2^31 floats), so the
  // check is tested with made-up numbers.
  CHECK_NOTHROW(common::cuda::check_fits(1000, 1000, "stepNN"));
  CHECK_THROWS_AS(common::cuda::check_fits(int64_t{40} << 30, size_t{20} << 30, "stepNN"), common::InputError);
  CHECK_THROWS_WITH(common::cuda::check_fits(int64_t{40} << 30, size_t{20} << 30, "stepNN"),
                    doctest::Contains("40960 MiB"));
}

TEST_CASE("cuda helpers: the no-GPU message names the step and the reason") {
  CHECK(common::cuda::no_gpu_message("step04_cuda_smem", 0, cudaSuccess) ==
        "step04_cuda_smem needs an NVIDIA GPU, and none was found (0 devices)");
  CHECK(common::cuda::no_gpu_message("step04_cuda_smem", 0, cudaErrorNoDevice).find(
            "step04_cuda_smem needs an NVIDIA GPU") == 0);
}

TEST_CASE("cuda helpers: require_gpu finds the GPU, or says clearly that there is none") {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    CHECK_THROWS_AS(common::cuda::require_gpu("stepNN"), common::NoGpuError);
    CHECK_THROWS_WITH(common::cuda::require_gpu("stepNN"), doctest::Contains("stepNN needs an NVIDIA GPU"));
  } else {
    CHECK(common::cuda::require_gpu("stepNN") >= 0);
  }
}
