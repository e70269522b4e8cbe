/// \file step01_naive/test_attention.cpp
/// \brief step01's tests: the conformance suite, the named fixtures, memory.
#include <doctest/doctest.h>

#include "attention.hpp"
#include "common/driver.hpp"
#include "common/testing.hpp"

TEST_CASE("step01: conformance suite (O and L against the fp64 reference)") {
  common::testing::check_conformance(step01::describe());
}

TEST_CASE("step01: named fixtures") {
  common::testing::check_named_fixtures(step01::describe());
  common::testing::check_seed004_shapes(step01::describe());  // causal and not
}

TEST_CASE("step01: peak working memory is the N_q x N_kv score matrix") {
  const common::Problem p = common::make_random_problem(common::Shape{1, 2, 300, 200, 16}, false, std::nullopt, 5);
  common::RunSettings settings;
  settings.repeat = 0;
  const common::RunReport report = common::run_step(step01::describe(), p, settings);
  // S plus the two row vectors m and l, and the head's O and L computed in aligned
  // working memory before they are copied out (so that every call rounds alike), for
  // one head at a time.
  CHECK(report.result.peak_bytes == (300 * 200 + 2 * 300 + 300 * 16 + 300) * 4);
}
