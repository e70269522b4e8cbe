/// \file step04_cuda_smem/test_attention.cpp
/// \brief step04's GPU tests: conformance, seed 004's shapes, > 48 KB of shared memory, bad input, repeatability.
#include <doctest/doctest.h>

#include <string>

#include "attention.hpp"
#include "common/cuda/cuda_check.cuh"
#include "common/testing.hpp"

namespace {

double extra(const common::Result& r, const std::string& name) {
  for (const auto& [key, value] : r.extra) {
    if (key == name) return value;
  }
  return -1;
}

}  // namespace

TEST_CASE("step04: conformance suite (fresh random inputs, poisoned outputs)") {
  common::testing::check_conformance(step04::describe());
}

TEST_CASE("step04: seed 004's shapes at d = 128") {
  for (const common::Shape& s : common::seed004_shapes()) {
    for (bool causal : {false, true}) {
      CAPTURE(common::describe(s));
      CAPTURE(causal);
      common::testing::check_problem(step04::describe(),
                                     common::make_random_problem(s, causal, 0.0f, common::testing::run_seed()));
    }
  }
}

TEST_CASE("step04: every head dimension needs more than 48 KB of shared memory, and runs") {
  for (int64_t d : step04::kHeadDims) {
    CAPTURE(d);
    const common::Problem p = common::make_random_problem(common::Shape{1, 3, 300, 200, d}, d == 64, 0.0f,
                                                          common::testing::run_seed());
    const common::Result r = step04::attention_forward(p);
    CHECK(extra(r, "smem_bytes") > 48 * 1024);
    common::testing::check_problem(step04::describe(), p);
  }
}

TEST_CASE("step04: bad input is refused with a one-line InputError") {
  const common::Problem p = common::make_random_problem(common::Shape{1, 1, 16, 16, 48}, false, 0.0f, 1);
  CHECK_THROWS_AS(step04::attention_forward(p), common::InputError);
  CHECK_THROWS_WITH(step04::attention_forward(p), doctest::Contains("supported: 32 64 96 128"));
  common::Problem short_k = common::make_random_problem(common::Shape{1, 1, 16, 16, 64}, false, 0.0f, 1);
  short_k.k.pop_back();
  CHECK_THROWS_AS(step04::attention_forward(short_k), common::InputError);
}

TEST_CASE("step04: a problem larger than the free device memory is refused before any launch") {
  // Every valid shape fits an 80 GB GPU (each tensor < 2^31 floats), so the
  // check itself is tested with made-up numbers.
  CHECK_NOTHROW(common::cuda::check_fits(1000, 1000, "step04_cuda_smem"));
  CHECK_THROWS_AS(common::cuda::check_fits(int64_t{40} << 30, size_t{20} << 30, "step04_cuda_smem"),
                  common::InputError);
  CHECK_THROWS_WITH(common::cuda::check_fits(int64_t{40} << 30, size_t{20} << 30, "step04_cuda_smem"),
                    doctest::Contains("40960 MiB"));
}

TEST_CASE("step04: the no-GPU message names the step and the reason") {
  const std::string none = common::cuda::no_gpu_message("step04_cuda_smem", 0, cudaSuccess);
  CHECK(none == "step04_cuda_smem needs an NVIDIA GPU, and none was found (0 devices)");
  const std::string broken = common::cuda::no_gpu_message("step04_cuda_smem", 0, cudaErrorNoDevice);
  CHECK(broken.find("step04_cuda_smem needs an NVIDIA GPU") == 0);
}

TEST_CASE("step04: repeated runs give identical outputs, and timed runs report kernel times") {
  const common::Problem p = common::make_random_problem(common::Shape{2, 2, 333, 517, 128}, true, 0.0f,
                                                        common::testing::run_seed());
  const common::Result first = step04::attention_forward(p);
  common::Options timed;
  timed.repeat = 3;
  const common::Result second = step04::attention_forward(p, timed);
  CHECK(first.o == second.o);
  CHECK(first.lse == second.lse);
  CHECK(first.kernel_ms.empty());
  REQUIRE(second.kernel_ms.size() == 3);
  for (double ms : second.kernel_ms) CHECK(ms > 0);
}
