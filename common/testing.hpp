/// \file testing.hpp
/// \brief doctest helpers shared by every step's tests: the conformance suite and the fixtures.
#pragma once

#include <cstdint>
#include <string>

#include "common/fixtures.hpp"
#include "common/step.hpp"

namespace common::testing {

/// The seed for this test run's random inputs: FLASH_TEST_SEED if set, else a
/// fresh one from std::random_device. Printed with every failure, so a failing
/// run can be repeated exactly.
uint64_t run_seed();

/// Runs `step` on every conformance case whose d it supports and whose lengths
/// are at most `max_seq` (0 = all): fresh random inputs per case, the result
/// poisoned before the run, O and L checked against the fp64 reference under the
/// tolerance rule. Every case is a doctest SUBCASE named after the case.
void check_conformance(const StepInfo& step, int64_t max_seq = 0, const Options& options = {});

/// Runs `step` on one problem and CHECKs O and L under the tolerance rule.
void check_problem(const StepInfo& step, const Problem& problem, const Options& options = {});

/// Runs `step` on a named fixture (with its budget M where the step uses one)
/// and CHECKs O against the fixture's known values as well as the reference.
void check_fixture(const StepInfo& step, const Fixture& fixture);

}  // namespace common::testing
