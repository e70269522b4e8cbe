/// \file driver.hpp
/// \brief The one program driver behind every step's `main.cpp`, the tour and the benchmarks.
///
/// Order of work (llm.c's runner order): build the problem, open a session (a
/// GPU step uploads once), run once, check against the fp64 reference, only
/// then time more runs. The result is downloaded once, after the checked run.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/problem.hpp"
#include "common/reference.hpp"
#include "common/reference_backward.hpp"
#include "common/step.hpp"

namespace common {

/// Floating-point operations of one forward pass: 4·B·H·N_q·N_kv·d, halved when
/// causal (only the lower triangle is needed).
double attention_flops(const Shape& shape, bool causal);

/// Floating-point operations of one backward pass: 2.5 × attention_flops
/// (FlashAttention's convention: the backward's five products against the
/// forward's two), halved when causal like the forward.
double attention_backward_flops(const Shape& shape, bool causal);

/// How to run a step: shared by the programs, the tour and the benchmarks.
struct RunSettings {
  bool check = false;  ///< compare with the fp64 reference
  int repeat = 1;  ///< timed runs after the checked one (0 = time the only run)
  int64_t sram_floats = 0;  ///< on-chip budget M (0 = the step's default)
  std::ostream* trace = nullptr;  ///< step-by-step trace output
  bool progress = false;  ///< progress bar on stderr
  Precision precision = Precision::fp32;  ///< the precision to compute in (--dtype)
  /// Stop repeating CPU runs once this many seconds were spent timing (0 = no
  /// limit); at least one run is always timed.
  double time_budget_s = 0;
  bool backward = false;  ///< run the backward pass after the forward (`--backward`)
  bool deterministic = false;  ///< the backward sums dQ in a fixed order (`--deterministic`)
};

/// One resolved configuration of a step's program: the command line, parsed
/// and checked once.
struct RunConfig {
  cli::ProblemSpec problem;  ///< what to run on
  RunSettings settings;  ///< how to run it
  bool json = false;  ///< one JSON object on stdout instead of the table
  std::string save_dir;  ///< write O and L (and dQ, dK, dV) here (empty: do not save)
};

/// What one run of a step's backward pass produced and measured.
struct BackwardReport {
  Gradients gradients;  ///< dQ, dK, dV and the step's counters (from the checked run)
  double time_ms = 0;  ///< median time of the timed runs
  int timed_runs = 0;  ///< how many runs the median is over
  bool kernel_only = false;  ///< time is kernel-only (CUDA events), not wall clock
  double tflops = 0;  ///< attention_backward_flops / time
  int64_t nonfinite = 0;  ///< gradients that are NaN or infinite
  std::optional<GradientVerdict> verdict;  ///< set when checked
};

/// What one run of a step produced and measured.
struct RunReport {
  Result result;  ///< O, L and the step's counters (from the checked run)
  double time_ms = 0;  ///< median time of the timed runs
  int timed_runs = 0;  ///< how many runs the median is over
  bool kernel_only = false;  ///< time is kernel-only (CUDA events), not wall clock
  double tflops = 0;  ///< attention_flops / time
  int64_t nonfinite = 0;  ///< outputs (O and L) that are NaN or infinite
  std::optional<Verdict> verdict;  ///< set when checked
  std::optional<BackwardReport> backward;  ///< set when the backward ran
};

/// Runs `step` on `problem`: opens a session, runs once (the result, its
/// working memory measured), checks, then times `repeat` more runs. With
/// `settings.backward` it then does the same for the backward pass, on the
/// forward's O and L and the upstream gradient `d_o` (which must then be given).
/// Throws InputError / NoGpuError.
RunReport run_step(const StepInfo& step, const Problem& problem, const RunSettings& settings,
                   const std::vector<float>* d_o = nullptr);
/// The upstream gradient dO of a `--backward` run: DIR/do.npy with `--load DIR`
/// when that file exists (float32 [B, H, N_q, d], finite), all ones for a
/// `--fixture` (loss = Σ O, the case the pages work by hand), otherwise random
/// from `--seed` (make_random_upstream).
std::vector<float> make_upstream(const cli::ProblemSpec& spec, const Problem& problem);

/// The problem `spec` describes: random inputs, a named fixture or .npy files.
/// For a fixture, `sram_floats` (when 0) becomes the budget its source used.
Problem make_problem(const cli::ProblemSpec& spec, const StepInfo& step, int64_t* sram_floats = nullptr);

/// Host bytes a run needs (inputs, outputs, the step's own working memory it
/// is known for, and the fp64 reference when checked). Throws InputError when
/// that is more than this machine's memory, before anything is allocated.
void require_host_memory(const StepInfo& step, const Shape& shape, bool check, bool backward = false);

/// How many of `result`'s O and L values are NaN or infinite.
int64_t count_nonfinite(const Result& result);

/// "3 of 80 outputs are not finite: these inputs overflow float32 inside the
/// step (...)" when some are (what the programs warn of), "" when none is.
std::string nonfinite_message(const Result& result);

/// Seconds `step` is expected to take on `problem` with `settings` on this
/// machine's CPU (the runs and the check), or 0 when it does not estimate.
double estimated_seconds(const StepInfo& step, const Shape& shape, bool causal, const RunSettings& settings);

/// "12 s", "3.5 min", "2.1 h".
std::string format_duration(double seconds);

/// The median of `samples` (which must not be empty).
double median(std::vector<double> samples);

/// Human-readable bytes: "512 B", "1.5 KiB", "3.0 MiB", "2.0 GiB".
std::string format_bytes(double bytes);

/// Runs a program's body, turning every exception into one line on stderr
/// (`name: error: …`) and an exit code: 2 for bad options, inputs, a missing GPU
/// or a failed write; 3 for anything else. Nothing escapes as a crash.
int guarded_main(const std::string& name, const std::function<int()>& body);

/// Parses the command line, runs the step and prints a table or one JSON object.
/// Exit codes: 0 ok, 1 check failed, 2 bad option or input, failed write, or
/// no GPU (one line on stderr), 3 an internal error.
int run_program(const StepInfo& step, int argc, char** argv);

}  // namespace common
