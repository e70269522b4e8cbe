/// \file step05_cuda_registers/test_attention.cpp
/// \brief step05's GPU tests (both variants): conformance, seed 004's shapes, > 48 KB of shared memory, bad input, repeatability.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attention.hpp"
#include "common/testing.hpp"

namespace {

double extra(const common::Result& r, const std::string& name) {
  for (const auto& [key, value] : r.extra) {
    if (key == name) return value;
  }
  return -1;
}

}  // namespace

TEST_CASE("step05: conformance suite (fresh random inputs, poisoned outputs)") {
  common::testing::check_conformance(step05::describe());
}

TEST_CASE("step05: seed 004's shapes at d = 128") {
  for (const common::Shape& s : common::seed004_shapes()) {
    for (bool causal : {false, true}) {
      CAPTURE(common::describe(s));
      CAPTURE(causal);
      common::testing::check_problem(step05::describe(),
                                     common::make_random_problem(s, causal, 0.0f, common::testing::run_seed()));
    }
  }
}

TEST_CASE("step05: shapes that need more than 48 KB of shared memory (d >= 64), and every d") {
  for (int64_t d : step05::kHeadDims) {
    CAPTURE(d);
    const common::Problem p = common::make_random_problem(common::Shape{1, 3, 300, 200, d}, d == 64, 0.0f,
                                                          common::testing::run_seed());
    const common::Result r = step05::attention_forward(p);
    CHECK((extra(r, "smem_bytes") > 48 * 1024) == (d >= 64));
    common::testing::check_problem(step05::describe(), p);
  }
}

TEST_CASE("step05: bad input is refused with a one-line InputError") {
  const common::Problem p = common::make_random_problem(common::Shape{1, 1, 16, 16, 48}, false, 0.0f, 1);
  CHECK_THROWS_AS(step05::attention_forward(p), common::InputError);
  CHECK_THROWS_WITH(step05::attention_forward(p), doctest::Contains("supported: 32 64 96 128"));
  common::Problem short_k = common::make_random_problem(common::Shape{1, 1, 16, 16, 64}, false, 0.0f, 1);
  short_k.k.pop_back();
  CHECK_THROWS_AS(step05::attention_forward(short_k), common::InputError);
}

TEST_CASE("step05: repeated runs give identical outputs, and timed runs report kernel times") {
  const common::Problem p = common::make_random_problem(common::Shape{2, 2, 333, 517, 128}, true, 0.0f,
                                                        common::testing::run_seed());
  const common::Result first = step05::attention_forward(p);
  common::Options timed;
  timed.repeat = 3;
  const common::Result second = step05::attention_forward(p, timed);
  CHECK(first.o == second.o);
  CHECK(first.lse == second.lse);
  CHECK(first.kernel_ms.empty());
  REQUIRE(second.kernel_ms.size() == 3);
  for (double ms : second.kernel_ms) CHECK(ms > 0);
}

TEST_CASE("step05: the local-memory variant passes the conformance suite up to N = 257") {
  common::testing::check_conformance(step05::describe_local_memory(), 257);
}

TEST_CASE("step05: both variants compute the same function") {
  const common::Problem p = common::make_random_problem(common::Shape{1, 2, 200, 300, 96}, true, 0.0f,
                                                        common::testing::run_seed());
  common::testing::check_problem(step05::describe_local_memory(), p);
  const common::Result a = step05::attention_forward(p);
  const common::Result b = step05::attention_forward_local_memory(p);
  double max_diff = 0;
  for (size_t e = 0; e < a.o.size(); ++e) max_diff = std::max(max_diff, double(std::abs(a.o[e] - b.o[e])));
  CHECK(max_diff < 1e-5);
}
