/// \file gpu_test_main.cpp
/// \brief doctest's main for GPU test executables: exit 77 (ctest: skipped) without a GPU,
/// or, built with FLASH_TESTS_NEED_COMPUTE_CAPABILITY (the Hopper steps), on another GPU.
///
/// Listing the tests (which ctest's test discovery does at build time) works on
/// any machine; running them needs a GPU. Without one every test reports
/// "skipped", never "passed".
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <exception>

#include "common/cuda/cuda_check.cuh"  // require_compute_capability

namespace {

/// Exit code that ctest's SKIP_RETURN_CODE turns into "skipped".
constexpr int kSkip = 77;

bool only_listing(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strstr(argv[i], "list-test") || std::strstr(argv[i], "-ltc") || std::strstr(argv[i], "help") ||
        std::strstr(argv[i], "version")) {
      return true;
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (!only_listing(argc, argv)) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::printf("no CUDA GPU found: GPU tests skipped\n");
      return kSkip;
    }
#ifdef FLASH_TESTS_NEED_COMPUTE_CAPABILITY
    // A step built for one GPU generation only (the Hopper steps: sm_90a) cannot run
    // on another: its tests skip there, saying which GPU they need, as its program does.
    try {
      common::cuda::require_compute_capability(FLASH_TESTS_NEED_COMPUTE_CAPABILITY, "this test program");
    } catch (const std::exception& e) {
      std::printf("%s: GPU tests skipped\n", e.what());
      return kSkip;
    }
#endif
  }
  doctest::Context context(argc, argv);
  return context.run();
}
