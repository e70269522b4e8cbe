/// \file step04_cuda_smem/test_attention.cpp
/// \brief step04's GPU tests: conformance, seed 004's shapes, > 48 KB of shared memory, bad input, repeatability.
#include <doctest/doctest.h>

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
