/// \file test_cuda_helpers.cpp
/// \brief Tests of the CUDA helpers that need no GPU: they run on every machine, CI included.
#include <doctest/doctest.h>

#include <vector>

#include "common/cuda/cuda_check.cuh"
#include "common/cuda/gpu_step.cuh"
#include "common/fixtures.hpp"

TEST_CASE("cuda helpers: a problem larger than the free device memory is refused") {
  // Every valid shape fits an 80 GB GPU (each tensor < 2^31 floats), so the
  // check is tested with made-up numbers.
  CHECK_NOTHROW(common::cuda::check_fits(1000, 1000, "stepNN"));
  CHECK_THROWS_AS(common::cuda::check_fits(int64_t{40} << 30, size_t{20} << 30, "stepNN"), common::InputError);
  CHECK_THROWS_WITH(common::cuda::check_fits(int64_t{40} << 30, size_t{20} << 30, "stepNN"),
                    doctest::Contains("40960 MiB"));
}

TEST_CASE("cuda helpers: the no-GPU message names the step and the reason a user can act on") {
  using common::cuda::no_gpu_message;
  // No driver at all: the runtime says "insufficient driver", which misleads.
  CHECK(no_gpu_message("step04_cuda_smem", 0, cudaErrorInsufficientDriver, false) ==
        "step04_cuda_smem needs an NVIDIA GPU: no NVIDIA GPU/driver found");
  CHECK(no_gpu_message("step04_cuda_smem", 0, cudaErrorNoDevice, false) ==
        "step04_cuda_smem needs an NVIDIA GPU: no NVIDIA GPU/driver found");
  // A driver that is too old for the runtime is a different, fixable problem.
  CHECK(no_gpu_message("s", 0, cudaErrorInsufficientDriver, true).find("older than") != std::string::npos);
  CHECK(no_gpu_message("s", 0, cudaErrorNoDevice, true) == "s needs an NVIDIA GPU: no NVIDIA GPU found (0 devices)");
  CHECK(no_gpu_message("s", 0, cudaSuccess, true) == "s needs an NVIDIA GPU: no NVIDIA GPU found (0 devices)");
}

TEST_CASE("cuda helpers: require_gpu finds the GPU, or says clearly that there is none") {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    CHECK_THROWS_AS(common::cuda::require_gpu("stepNN"), common::NoGpuError);
    CHECK_THROWS_WITH(common::cuda::require_gpu("stepNN"), doctest::Contains("stepNN needs an NVIDIA GPU"));
    if (!common::cuda::nvidia_driver_present()) {
      CHECK_THROWS_WITH(common::cuda::require_gpu("stepNN"), doctest::Contains("no NVIDIA GPU/driver found"));
    }
  } else {
    CHECK(common::cuda::require_gpu("stepNN") >= 0);
  }
}

TEST_CASE("cuda helpers: a kernel built for another GPU generation says which GPU it needs and which it found") {
  CHECK(common::cuda::wrong_gpu_message("step16_wgmma", 90, 80, "NVIDIA A100-SXM4-80GB") ==
        "step16_wgmma needs a Hopper GPU (H100, H200; compute capability 9.0); this GPU, NVIDIA A100-SXM4-80GB, "
        "has compute capability 8.0");
  CHECK(common::cuda::wrong_gpu_message("s", 100, 90, "X").find("compute capability 10.0") != std::string::npos);
  CHECK_NOTHROW(common::cuda::require_compute_capability(0, "s"));  // 0: any GPU, and no GPU call made
}

TEST_CASE("cuda helpers: the head-dim dispatcher reaches exactly the compiled d, and refuses others") {
  using Dims = common::cuda::HeadDims<32, 64, 96, 128>;
  CHECK(Dims::list() == std::vector<int64_t>{32, 64, 96, 128});
  for (int64_t d : {32, 64, 96, 128}) {
    int seen = 0;
    Dims::dispatch(d, [&](auto D) { seen = D(); });
    CHECK(seen == d);
    CHECK(Dims::dispatch(d, [](auto D) { return 10 * D(); }) == 10 * d);
  }
  for (int64_t d : {0, 1, 16, 80, 129, 256}) {
    CAPTURE(d);
    CHECK_THROWS_AS(Dims::dispatch(d, [](auto) {}), common::InputError);
    CHECK_THROWS_WITH(Dims::dispatch(d, [](auto) {}), doctest::Contains("supported: 32 64 96 128"));
  }
}

TEST_CASE("cuda helpers: a GPU step without a GPU says so (NoGpuError), after refusing bad input first") {
  int count = 0;
  const bool have_gpu = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  (void)cudaGetLastError();
  common::GpuKernel kernel;
  kernel.launch = [](const common::DeviceArgs&) {};
  const common::StepInfo step = common::cuda::gpu_step("stepNN", "a test step", {64}, kernel);
  CHECK(step.needs_gpu);
  CHECK(step.gpu != nullptr);
  common::Problem p = common::make_random_problem(common::Shape{1, 1, 4, 4, 8}, false, std::nullopt, 1);
  CHECK_THROWS_AS(step.forward(p, {}), common::InputError);  // d = 8 is not compiled
  if (!have_gpu) {
    p = common::make_random_problem(common::Shape{1, 1, 4, 4, 64}, false, std::nullopt, 1);
    CHECK_THROWS_AS(step.forward(p, {}), common::NoGpuError);
  }
}
