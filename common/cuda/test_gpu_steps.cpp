/// \file test_gpu_steps.cpp
/// \brief The tests every CUDA step runs, written once and built into each step's test executable.
///
/// cmake/flash_step.cmake compiles this file into `<step>_tests` with the step's
/// directory on the include path and these definitions, from the step's
/// `flash_add_step(... CUDA TESTS ...)`:
///  - `FLASH_STEP`: the step's namespace, e.g. `step12`, which also begins every
///    test case's name ("step12: …");
///  - `FLASH_TESTS_SIXTEEN_BIT`: the step computes in bf16 and fp16 (not fp32),
///    and is run and judged in both;
///  - `FLASH_TESTS_CAUSAL_TAILS`: causal with N_q ≠ N_kv at lengths just off the
///    tile sizes (from step 6, whose causal loop skips and masks tiles);
///  - `FLASH_TESTS_SCALE_SIGNS`: every sign of the scale at every d (from step
///    12, whose kernel folds sign(scale) into Q_i);
///  - `FLASH_TESTS_BACKWARD`: the step has a backward pass, run on the gradient
///    conformance suite with dQ by atomics;
///  - `FLASH_TESTS_DETERMINISTIC`: its backward also sums dQ in a fixed order
///    (from step 29), run on the suite in that mode too and checked bitwise-repeatable;
///    without it, asking for that mode is refused;
///  - `FLASH_TESTS_NO_SPILLS_AT`: the resource report shows no spills at this d,
///    or at every d when it is 0; absent: no such test (steps 4 and 5).
/// What is particular to a step (step 5's spilling build, step 21's second block
/// shape) stays in the step's own test_*.cpp.
#include <doctest/doctest.h>

#include <utility>
#include <vector>

#include "attention.hpp"  // the step's header: its directory is on this executable's include path
#include "common/testing.hpp"

using namespace common::testing;

/// The step's namespace as a string, e.g. "step12": every test name begins with it.
#define FLASH_STEP_LABEL DOCTEST_TOSTR(FLASH_STEP)

namespace {

/// The step under test.
common::StepInfo step() { return FLASH_STEP::describe(); }

/// Options that run and judge the step in `precision`.
common::Options in(common::Precision precision) {
  common::Options options;
  options.precision = precision;
  return options;
}

#if FLASH_TESTS_SIXTEEN_BIT
const common::Options bf16 = in(common::Precision::bf16), fp16 = in(common::Precision::fp16);
/// The precisions the step is run and judged in.
const std::vector<common::Options> precisions = {bf16, fp16};
#else
const std::vector<common::Options> precisions = {in(common::Precision::fp32)};
#endif

}  // namespace

// The ends of test names that differ with the precisions.
#if FLASH_TESTS_SIXTEEN_BIT
#define FLASH_TESTS_IN_EACH ", bf16 and fp16"
#define FLASH_TESTS_NOT_FP32 ", and fp32 is not one of its precisions"  // no ";": ctest would split the name
#else
#define FLASH_TESTS_IN_EACH ""
#define FLASH_TESTS_NOT_FP32 ""
#endif

TEST_CASE(FLASH_STEP_LABEL ": computes in the precisions its tests judge it in") {
  std::vector<common::Precision> judged;
  for (const common::Options& options : precisions) judged.push_back(options.precision);
  CHECK(step().precisions == judged);
}

#if FLASH_TESTS_SIXTEEN_BIT
TEST_CASE(FLASH_STEP_LABEL ": conformance suite in bf16 (fresh random inputs, outputs poisoned)") {
  check_conformance(step(), 0, bf16);
}

TEST_CASE(FLASH_STEP_LABEL ": conformance suite in fp16 (fresh random inputs, outputs poisoned)") {
  check_conformance(step(), 0, fp16);
}
#else
TEST_CASE(FLASH_STEP_LABEL ": conformance suite (fresh random inputs, outputs poisoned)") { check_conformance(step()); }
#endif

#if FLASH_TESTS_CAUSAL_TAILS
TEST_CASE(FLASH_STEP_LABEL ": causal with N_q != N_kv, across tile boundaries, every d" FLASH_TESTS_IN_EACH) {
  for (const common::Options& options : precisions) {
    CAPTURE(common::name(options.precision));
    check_causal_tails(step(), step().head_dims, options);
  }
}
#endif

TEST_CASE(FLASH_STEP_LABEL ": the Torch/Numba/CUDA notebook's shapes, causal and not" FLASH_TESTS_IN_EACH) {
  for (const common::Options& options : precisions) check_seed004_shapes(step(), options);
}

TEST_CASE(FLASH_STEP_LABEL ": one upload, timed runs, and bitwise identical outputs every run") {
  // N_q > N_kv, causal and not; and N_q < N_kv, causal.
  const std::vector<std::pair<common::Shape, bool>> problems = {{common::Shape{2, 3, 777, 555, 128}, false},
                                                                {common::Shape{2, 3, 777, 555, 128}, true},
                                                                {common::Shape{2, 2, 333, 517, 128}, true}};
  for (const common::Options& options : precisions) {
    for (const auto& [shape, causal] : problems) {
      CAPTURE(common::describe(shape));
      CAPTURE(causal);
      check_session(step(), common::make_random_problem(shape, causal, std::nullopt, run_seed()), 3, options);
    }
  }
}

TEST_CASE(FLASH_STEP_LABEL ": B*H = 70000, more than a grid's y dimension holds, against the fp64 reference") {
  check_many_heads(step(), precisions.front());  // the grid is 1-D: T_r * B*H blocks, or one block per head
}

TEST_CASE(FLASH_STEP_LABEL ": bad input gives a clear error" FLASH_TESTS_NOT_FP32) {
  for (const common::Options& options : precisions) {
    for (int64_t unsupported_d : {48, 80}) check_bad_input(step(), unsupported_d, options);
  }
#if FLASH_TESTS_SIXTEEN_BIT
  const common::Problem p = common::make_random_problem(common::Shape{1, 1, 8, 8, 64}, false, std::nullopt, 1);
  CHECK_THROWS_WITH_AS(step().forward(p, {}), doctest::Contains("--dtype fp32 is not one of its precisions"),
                       common::InputError);
#endif
}

#if FLASH_TESTS_SCALE_SIGNS
TEST_CASE(FLASH_STEP_LABEL ": any scale, at every d: negative, zero and positive, causal and not, tails") {
  // From step 13 on the kernel folds sign(scale) into its tile of Q_i and exponentiates
  // |scale|·S_ij (common/cuda/scale_sign.cuh): each sign, every d, lengths that end inside a
  // tile, every precision.
  for (const common::Options& options : precisions) {
    for (int64_t d : step().head_dims) {
      for (float scale : {-1.3f, -0.05f, 0.0f, 2.0f}) {
        for (bool causal : {false, true}) {
          CAPTURE(d);
          CAPTURE(scale);
          CAPTURE(causal);
          check_problem(step(), common::make_random_problem(common::Shape{2, 1, 150, 77, d}, causal, scale, run_seed()),
                        options);
        }
      }
    }
  }
}
#endif

#ifdef FLASH_TESTS_NO_SPILLS_AT
#if FLASH_TESTS_NO_SPILLS_AT == 0
#define FLASH_TESTS_SPILL_DIMS "any d" FLASH_TESTS_IN_EACH
#else
#define FLASH_TESTS_SPILL_DIMS "d = " DOCTEST_TOSTR(FLASH_TESTS_NO_SPILLS_AT)
#endif
TEST_CASE(FLASH_STEP_LABEL ": the resource report has no spills at " FLASH_TESTS_SPILL_DIMS) {
  const std::vector<int64_t> head_dims =
      FLASH_TESTS_NO_SPILLS_AT == 0 ? step().head_dims : std::vector<int64_t>{FLASH_TESTS_NO_SPILLS_AT};
  for (int64_t d : head_dims) {
    CAPTURE(d);
    for (const common::Options& options : precisions) check_no_spills(step(), d, options);
  }
}
#endif

#if FLASH_TESTS_BACKWARD
TEST_CASE(FLASH_STEP_LABEL ": gradient conformance suite, dQ by atomics" FLASH_TESTS_IN_EACH) {
  for (const common::Options& options : precisions) check_gradient_conformance(step(), 0, options);
}

#if FLASH_TESTS_DETERMINISTIC
/// The ways the step sums dQ: by atomics, and in a fixed order (named in the tests below).
const std::vector<bool> dq_modes = {false, true};
#define FLASH_TESTS_DQ_MODES "every d and dQ mode"
#define FLASH_TESTS_SESSION_BITS ", the deterministic mode with the same bits"

TEST_CASE(FLASH_STEP_LABEL ": gradient conformance suite, deterministic dQ" FLASH_TESTS_IN_EACH) {
  for (common::Options options : precisions) {
    options.deterministic = true;
    check_gradient_conformance(step(), 0, options);
  }
}
#else
const std::vector<bool> dq_modes = {false};
#define FLASH_TESTS_DQ_MODES "every d, dQ by atomics"
#define FLASH_TESTS_SESSION_BITS ""

TEST_CASE(FLASH_STEP_LABEL ": a step whose dQ is summed by atomics only refuses the deterministic mode") {
  CHECK_FALSE(step().has_deterministic_option);
  const common::Problem p =
      common::make_random_problem(common::Shape{1, 1, 70, 70, step().head_dims.front()}, false, std::nullopt, 1);
  common::Options options = precisions.front();
  const common::Result forward = step().forward(p, options);
  options.deterministic = true;
  CHECK_THROWS_AS(step().backward(p, {forward.o, forward.lse, common::make_random_upstream(p.shape, 2)}, options),
                  common::InputError);
}
#endif

TEST_CASE(FLASH_STEP_LABEL ": gradients, causal with N_q != N_kv across tile boundaries, " FLASH_TESTS_DQ_MODES) {
  for (common::Options options : precisions) {
    for (bool deterministic : dq_modes) {
      options.deterministic = deterministic;
      for (int64_t d : step().head_dims) {
        for (auto [n_q, n_kv] : {std::pair<int64_t, int64_t>{65, 200}, {200, 65}, {127, 129}, {1, 300}, {300, 1}}) {
          CAPTURE(d);
          CAPTURE(n_q);
          CAPTURE(n_kv);
          const common::Shape shape{1, 3, n_q, n_kv, d};
          check_gradient_problem(step(), common::make_random_problem(shape, true, std::nullopt, run_seed() + n_q),
                                 options);
        }
      }
    }
  }
}

TEST_CASE(FLASH_STEP_LABEL ": gradients for B*H = 70000 heads and any scale's sign") {
  const int64_t d = step().head_dims.front();
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    check_gradient_problem(
        step(), common::make_random_problem(common::Shape{700, 100, 3, 5, d}, causal, std::nullopt, run_seed()),
        precisions.front());
  }
  for (float scale : {-1.3f, 0.0f, 2.0f}) {
    CAPTURE(scale);
    check_gradient_problem(step(),
                           common::make_random_problem(common::Shape{2, 1, 150, 77, d}, true, scale, run_seed()),
                           precisions.front());
  }
}

TEST_CASE(FLASH_STEP_LABEL ": backward sessions: repeated runs pass" FLASH_TESTS_SESSION_BITS) {
  const std::vector<std::pair<common::Shape, bool>> problems = {{common::Shape{2, 3, 777, 555, 128}, false},
                                                                {common::Shape{2, 2, 333, 517, 128}, true}};
  for (common::Options options : precisions) {
    for (const auto& [shape, causal] : problems) {
      CAPTURE(common::describe(shape));
      CAPTURE(causal);
      const common::Problem p = common::make_random_problem(shape, causal, std::nullopt, run_seed());
      options.deterministic = false;  // atomics: checked, timed, but the order of dQ's sums may differ
      check_backward_session(step(), p, 3, options, /*bitwise=*/false);
      if (!step().has_deterministic_option) continue;
      options.deterministic = true;
      check_backward_session(step(), p, 3, options, /*bitwise=*/true);
    }
  }
}

TEST_CASE(FLASH_STEP_LABEL ": the backward kernels' resource report has no spills at any d") {
  for (const common::Options& options : precisions) {
    for (int64_t d : step().head_dims) {
      CAPTURE(d);
      const common::Problem p = common::make_random_problem(common::Shape{1, 1, 70, 70, d}, false, std::nullopt, 1);
      const common::Result forward = step().forward(p, options);
      const common::Gradients g =
          step().backward(p, {forward.o, forward.lse, common::make_random_upstream(p.shape, 2)}, options);
      CHECK(extra(g.extra, "registers") > 0);
      CHECK(extra(g.extra, "local_bytes") == 0);
      if (const double dq = extra(g.extra, "dq_kernel_local_bytes"); dq >= 0)
        CHECK(dq == 0);  // a step with a dQ kernel
      CHECK(extra(g.extra, "blocks_per_sm") >= 1);
    }
  }
}

TEST_CASE(FLASH_STEP_LABEL ": bad backward input gives a clear error") {
  for (const common::Options& options : precisions) check_backward_bad_input(step(), step().head_dims.front(), options);
}
#endif
