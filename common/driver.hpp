/// \file driver.hpp
/// \brief The one program driver behind every step's `main.cpp`, the tour and the benchmarks.
///
/// Order of work (llm.c's runner order): build the problem, run once, check
/// against the fp64 reference, only then warm up and time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/problem.hpp"
#include "common/reference.hpp"
#include "common/step.hpp"

namespace common {

/// Floating-point operations of one forward pass: 4·B·H·N_q·N_kv·d, halved when
/// causal (only the lower triangle is needed).
double attention_flops(const Shape& shape, bool causal);

/// What to do besides running once.
struct RunSettings {
  bool check = false;        ///< compare with the fp64 reference
  int repeat = 1;            ///< timed runs after the warm-up (0 = time the first run only)
  int64_t sram_floats = 0;   ///< on-chip budget M (0 = the step's default)
  std::ostream* trace = nullptr;  ///< step-by-step trace output
  bool progress = false;     ///< progress bar on stderr
  /// Stop repeating CPU runs once this many seconds were spent timing (0 = no
  /// limit); at least one run is always timed.
  double time_budget_s = 0;
};

/// What one run of a step produced and measured.
struct RunReport {
  Result result;                 ///< O, L and the step's counters (from the first run)
  double time_ms = 0;            ///< median time of the timed runs
  int timed_runs = 0;            ///< how many runs the median is over
  bool kernel_only = false;      ///< time is kernel-only (CUDA events), not wall clock
  double tflops = 0;             ///< attention_flops / time
  std::optional<Verdict> verdict;  ///< set when checked
};

/// Runs `step` on `problem`: once (the result; its working memory measured), then
/// the check, then `repeat` timed runs. Throws InputError / NoGpuError.
RunReport run_step(const StepInfo& step, const Problem& problem, const RunSettings& settings);

/// The median of `samples` (which must not be empty).
double median(std::vector<double> samples);

/// Human-readable bytes: "512 B", "1.5 KiB", "3.0 MiB", "2.0 GiB".
std::string format_bytes(double bytes);

/// Parses the command line, runs the step and prints a table or one JSON object.
/// Exit codes: 0 ok, 1 check failed, 2 bad option or input (one line on stderr).
int run_program(const StepInfo& step, int argc, char** argv);

}  // namespace common
