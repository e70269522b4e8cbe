/// \file testing.cpp
/// \brief The conformance suite and fixture checks, written once for every step.
#include "common/testing.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>

#include "common/driver.hpp"
#include "common/reference.hpp"
#include "common/reference_backward.hpp"

namespace common::testing {

uint64_t run_seed() {
  static const uint64_t seed = []() -> uint64_t {
    if (const char* env = std::getenv("FLASH_TEST_SEED")) return std::strtoull(env, nullptr, 10);
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd();
  }();
  return seed;
}

int run_program_captured(const StepInfo& step, const std::vector<std::string>& args, std::string* out,
                         std::string* err) {
  std::vector<std::string> storage = {step.name};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : storage) argv.push_back(a.data());
  std::ostringstream out_s, err_s;
  auto* old_out = std::cout.rdbuf(out_s.rdbuf());
  auto* old_err = std::cerr.rdbuf(err_s.rdbuf());
  const int code = run_program(step, static_cast<int>(argv.size()), argv.data());
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  if (out) *out = out_s.str();
  if (err) *err = err_s.str();
  return code;
}

void check_problem(const StepInfo& step, const Problem& problem, const Options& options) {
  const Result result = step.forward(problem, options);
  const Verdict v = check_result(problem, result, options.precision);
  const std::string what = step.name + ", " + describe(problem.shape) + (problem.causal ? " causal" : "") + ", scale " +
                           std::to_string(problem.scale) + ", " + name(options.precision) +
                           ", FLASH_TEST_SEED=" + std::to_string(run_seed());
  INFO(what);
  CHECK(result.o.size() == static_cast<size_t>(problem.shape.q_elements()));
  CHECK(result.lse.size() == static_cast<size_t>(problem.shape.lse_elements()));
  CHECK_MESSAGE(v.passed, v.failure);
}

void check_conformance(const StepInfo& step, int64_t max_seq, const Options& options, bool large_scores) {
  const auto cases = conformance_cases(step.head_dims, max_seq);
  REQUIRE(!cases.empty());
  uint64_t case_seed = run_seed();
  for (const ConformanceCase& c : cases) {
    ++case_seed;  // fresh inputs for every case
    if (!large_scores && c.score_magnitude > 0) continue;
    SUBCASE(c.name.c_str()) { check_problem(step, make_problem(c, case_seed), options); }
  }
}

void check_session(const StepInfo& step, const Problem& problem, int timed, const Options& options) {
  const std::unique_ptr<Session> session = open_session(step, problem, options);
  session->run();
  const Result first = session->result();
  const Verdict v = check_result(problem, first, options.precision);
  INFO(step.name << ", " << describe(problem.shape) << ", " << name(options.precision)
                 << ", FLASH_TEST_SEED=" << run_seed());
  CHECK_MESSAGE(v.passed, v.failure);
  for (int r = 0; r < timed; ++r) CHECK(session->timed_run_ms() > 0);
  const Result again = session->result();
  CHECK(again.o == first.o);
  CHECK(again.lse == first.lse);
}

void check_seed004_shapes(const StepInfo& step, const Options& options) {
  const uint64_t seed = run_seed();
  for (const Shape& s : seed004_shapes()) {
    for (bool causal : {false, true}) {
      CAPTURE(describe(s));
      CAPTURE(causal);
      check_problem(step, make_random_problem(s, causal, std::nullopt, seed), options);
    }
  }
}

void check_causal_tails(const StepInfo& step, const std::vector<int64_t>& head_dims, const Options& options) {
  const uint64_t seed = run_seed();
  for (int64_t d : head_dims) {
    for (auto [n_q, n_kv] : {std::pair<int64_t, int64_t>{65, 200},
                             {200, 65},
                             {127, 129},
                             {300, 31},
                             {1, 500},
                             {500, 1},
                             {64, 64},
                             {129, 96}}) {
      CAPTURE(d);
      CAPTURE(n_q);
      CAPTURE(n_kv);
      check_problem(step, make_random_problem(Shape{1, 3, n_q, n_kv, d}, true, std::nullopt, seed + n_q * 7 + n_kv),
                    options);
    }
  }
}

void check_many_heads(const StepInfo& step, const Options& options) {
  const int64_t d = step.head_dims.empty() ? 32 : step.head_dims.front();  // the step's smallest d (32 for most)
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    check_problem(step, make_random_problem(Shape{700, 100, 3, 5, d}, causal, std::nullopt, run_seed()), options);
  }
}

void check_bad_input(const StepInfo& step, int64_t unsupported_d, const Options& options) {
  Problem p = make_random_problem(Shape{1, 1, 8, 8, unsupported_d}, false, std::nullopt, 1);
  const std::string named = "head_dim " + std::to_string(unsupported_d);
  CHECK_THROWS_WITH_AS(step.forward(p, options), doctest::Contains(named.c_str()), InputError);
  p = make_random_problem(Shape{1, 1, 8, 8, 64}, false, std::nullopt, 1);
  p.k.pop_back();
  CHECK_THROWS_AS(step.forward(p, options), InputError);
  Problem nan = make_random_problem(Shape{1, 1, 8, 8, 64}, false, std::nullopt, 1);
  nan.v[3] = std::nanf("");
  CHECK_THROWS_WITH_AS(step.forward(nan, options), doctest::Contains("inputs must be finite"), InputError);
}

double extra(const Result& result, const std::string& name) { return extra(result.extra, name); }

double extra(const Figures& figures, const std::string& name) {
  for (const auto& [key, value] : figures) {
    if (key == name) return value;
  }
  return -1;
}

void check_no_spills(const StepInfo& step, int64_t head_dim, const Options& options) {
  const Result r = step.forward(make_random_problem(Shape{1, 2, 300, 300, head_dim}, false, std::nullopt, 3), options);
  CAPTURE(head_dim);
  CHECK(extra(r, "local_bytes") == 0);
  CHECK(extra(r, "blocks_per_sm") >= 1);
  CHECK(extra(r, "registers") > 0);
}

void check_fixture(const StepInfo& step, const Fixture& fixture) {
  Options options;
  options.sram_floats = fixture.sram_floats;  // 0: the step's default
  const std::string what = "fixture: " + fixture.name + " (" + fixture.source + ")";
  INFO(what);
  const Result result = step.forward(fixture.problem, options);
  REQUIRE(result.o.size() == static_cast<size_t>(fixture.problem.shape.q_elements()));
  for (size_t i = 0; i < fixture.expected_o.size(); ++i) {
    CHECK(std::abs(result.o[i] - fixture.expected_o[i]) <= fixture.expected_tolerance);
  }
  const Verdict v = check_result(fixture.problem, result);
  CHECK_MESSAGE(v.passed, v.failure);
}

void check_named_fixtures(const StepInfo& step) {
  check_fixture(step, hand_worked_example());
  check_fixture(step, two_by_two_m9());
  check_fixture(step, seed002_n16_d8());
}

void check_smem_over_48kb(const StepInfo& step, int64_t from_d) {
  constexpr double kDefaultSmemBytes = 48 * 1024;  // a block's shared memory without cudaFuncSetAttribute
  for (int64_t d : step.head_dims) {
    CAPTURE(d);
    const Problem p = make_random_problem(Shape{1, 3, 300, 200, d}, d == 64, std::nullopt, run_seed());
    CHECK((extra(step.forward(p, {}), "smem_bytes") > kDefaultSmemBytes) == (d >= from_d));
    check_problem(step, p);
  }
}

namespace {

std::string describe_run(const StepInfo& step, const Problem& problem, const Options& options) {
  return step.name + ", " + describe(problem.shape) + (problem.causal ? " causal" : "") + ", scale " +
         std::to_string(problem.scale) + ", " + name(options.precision) +
         (options.deterministic ? ", deterministic" : "") + ", FLASH_TEST_SEED=" + std::to_string(run_seed());
}

}  // namespace

void check_gradient_problem(const StepInfo& step, const Problem& problem, const Options& options,
                            const std::vector<float>* d_o) {
  REQUIRE(step.backward);
  INFO(describe_run(step, problem, options));
  const Result forward = step.forward(problem, options);
  const Verdict fv = check_result(problem, forward, options.precision);
  CHECK_MESSAGE(fv.passed, "forward: " << fv.failure);
  BackwardInputs inputs{forward.o, forward.lse,
                        d_o ? *d_o : make_random_upstream(problem.shape, run_seed() ^ uint64_t(problem.q.size()))};
  const Gradients g = step.backward(problem, inputs, options);
  CHECK(g.dq.size() == static_cast<size_t>(problem.shape.q_elements()));
  CHECK(g.dk.size() == static_cast<size_t>(problem.shape.kv_elements()));
  CHECK(g.dv.size() == static_cast<size_t>(problem.shape.kv_elements()));
  const GradientVerdict v = check_gradients(problem, inputs.d_o, g, options.precision, &inputs.o);
  CHECK_MESSAGE(v.passed, "backward: " << v.failure);
}

void check_gradient_conformance(const StepInfo& step, int64_t max_seq, const Options& options, bool large_scores) {
  const auto cases = conformance_cases(step.head_dims, max_seq);
  REQUIRE(!cases.empty());
  uint64_t case_seed = run_seed();
  for (const ConformanceCase& c : cases) {
    ++case_seed;  // fresh inputs for every case
    if (!large_scores && c.score_magnitude > 0) continue;
    SUBCASE(c.name.c_str()) {
      const Problem problem = make_problem(c, case_seed);
      const std::vector<float> d_o = make_random_upstream(problem.shape, case_seed);
      check_gradient_problem(step, problem, options, &d_o);
    }
  }
}

void check_backward_session(const StepInfo& step, const Problem& problem, int timed, const Options& options,
                            bool bitwise) {
  INFO(describe_run(step, problem, options));
  const Result forward = step.forward(problem, options);
  const BackwardInputs inputs{forward.o, forward.lse, make_random_upstream(problem.shape, run_seed())};
  const std::unique_ptr<BackwardSession> session = open_backward_session(step, problem, inputs, options);
  session->run();
  const Gradients first = session->gradients();
  const GradientVerdict v = check_gradients(problem, inputs.d_o, first, options.precision, &inputs.o);
  CHECK_MESSAGE(v.passed, v.failure);
  for (int r = 0; r < timed; ++r) CHECK(session->timed_run_ms() > 0);
  if (!bitwise) return;
  const Gradients again = session->gradients();
  CHECK(again.dq == first.dq);
  CHECK(again.dk == first.dk);
  CHECK(again.dv == first.dv);
}

void check_backward_bad_input(const StepInfo& step, int64_t d, const Options& options) {
  const Problem p = make_random_problem(Shape{1, 2, 9, 7, d}, false, std::nullopt, 1);
  const Result forward = step.forward(p, options);
  const BackwardInputs good{forward.o, forward.lse, make_random_upstream(p.shape, 2)};
  const auto refused = [&](BackwardInputs in, const char* named) {
    CAPTURE(named);
    CHECK_THROWS_WITH_AS(step.backward(p, in, options), doctest::Contains(named), InputError);
  };
  BackwardInputs in = good;
  in.d_o.pop_back();
  refused(in, "dO has");
  in = good;
  in.o.push_back(0.0f);
  refused(in, "O has");
  in = good;
  in.lse.pop_back();
  refused(in, "L has");
  in = good;
  in.d_o[5] = std::nanf("");
  refused(in, "dO holds nan");
  in = good;
  in.lse[3] = std::numeric_limits<float>::infinity();
  refused(in, "L holds inf");
}

}  // namespace common::testing
