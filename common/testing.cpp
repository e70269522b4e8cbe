/// \file testing.cpp
/// \brief The conformance suite and fixture checks, written once for every step.
#include "common/testing.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "common/reference.hpp"

namespace common::testing {

uint64_t run_seed() {
  static const uint64_t seed = []() -> uint64_t {
    if (const char* env = std::getenv("FLASH_TEST_SEED")) return std::strtoull(env, nullptr, 10);
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd();
  }();
  return seed;
}

void check_problem(const StepInfo& step, const Problem& problem, const Options& options) {
  const Result result = step.forward(problem, options);
  const Verdict v = check_result(problem, result);
  const std::string what = step.name + ", " + describe(problem.shape) + (problem.causal ? " causal" : "") +
                           ", scale " + std::to_string(problem.scale) +
                           ", FLASH_TEST_SEED=" + std::to_string(run_seed());
  INFO(what);
  CHECK(result.o.size() == static_cast<size_t>(problem.shape.q_elements()));
  CHECK(result.lse.size() == static_cast<size_t>(problem.shape.lse_elements()));
  CHECK_MESSAGE(v.errors.max_err_o <= v.tolerance.o,
                "max |O - O_ref| = " << v.errors.max_err_o << " > tolerance " << v.tolerance.o);
  CHECK_MESSAGE(v.errors.max_err_lse <= v.tolerance.lse,
                "max |L - L_ref| = " << v.errors.max_err_lse << " > tolerance " << v.tolerance.lse);
}

void check_conformance(const StepInfo& step, int64_t max_seq, const Options& options) {
  const auto cases = conformance_cases(step.head_dims, max_seq);
  REQUIRE(!cases.empty());
  uint64_t case_seed = run_seed();
  for (const ConformanceCase& c : cases) {
    ++case_seed;  // fresh inputs for every case
    SUBCASE(c.name.c_str()) {
      Options o = options;
      if (step.uses_sram_budget && o.sram_floats == 0) o.sram_floats = step.default_sram_floats;
      check_problem(step, make_problem(c, case_seed), o);
    }
  }
}

void check_fixture(const StepInfo& step, const Fixture& fixture) {
  Options options;
  options.sram_floats = fixture.sram_floats > 0 ? fixture.sram_floats : step.default_sram_floats;
  const std::string what = "fixture: " + fixture.name + " (" + fixture.source + ")";
  INFO(what);
  const Result result = step.forward(fixture.problem, options);
  REQUIRE(result.o.size() == static_cast<size_t>(fixture.problem.shape.q_elements()));
  for (size_t i = 0; i < fixture.expected_o.size(); ++i) {
    CHECK(std::abs(result.o[i] - fixture.expected_o[i]) <= fixture.expected_tolerance);
  }
  const Verdict v = check_result(fixture.problem, result);
  CHECK(v.errors.max_err_o <= v.tolerance.o);
  CHECK(v.errors.max_err_lse <= v.tolerance.lse);
}

}  // namespace common::testing
