/// \file tour.cpp
/// \brief The tour: every built step on the same problem, one table.
///
/// Usage: build/bin/tour [--seq N] [--heads H] [--head-dim D] [--causal] … (`--help`)
/// Default problem: B=1, H=4, N_q = N_kv = 512, d=64 (small enough for the
/// thread simulator of step 3, large enough to show the memory difference).
/// A step that cannot run this problem (a head dimension it was not compiled
/// for, no GPU) is listed with the reason; a step estimated to take longer
/// than --max-seconds is listed as skipped, with the estimate. A step with a
/// backward pass (steps 25 to 31) runs it too, after its forward, on a random
/// dO: a second table gives its time and its dQ, dK, dV errors against the fp64
/// gradients, checked under the same rule.
#include <unistd.h>

#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/driver.hpp"
#include "common/fixtures.hpp"
#include "common/output_file.hpp"
#include "tour_steps.hpp"

namespace {

std::string sci(double x) {
  std::ostringstream out;
  out << std::scientific << std::setprecision(1) << x;
  return out.str();
}

std::string fixed(double x, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << x;
  return out.str();
}

/// HBM bytes read and written, where the step counts them ("-" where it does not).
std::string traffic(const std::optional<common::Traffic>& t) {
  return t ? common::format_bytes(double(t->hbm_read_bytes + t->hbm_write_bytes)) : std::string("-");
}

/// A backward step's line in the second table: its backward's report, or why it has none.
struct BackwardLine {
  std::string step;
  std::optional<common::BackwardReport> report;
  std::string why_not;  ///< set when the backward did not run (the reason shown in the first table)
};

/// The second table: each backward step's backward pass. Returns how many failed their check.
int print_backward(const std::vector<BackwardLine>& lines) {
  std::cout
      << "\nThe backward pass of the steps that have one: dQ, dK, dV from the forward's O and L and a random dO,\n"
         "checked against common's fp64 gradients (2 x standard attention's gradient error + a floor).\n\n";
  std::cout << std::left << std::setw(26) << "step" << std::right << std::setw(11) << "time (ms)" << std::setw(10)
            << "TFLOP/s" << std::setw(12) << "max err dQ" << std::setw(12) << "max err dK" << std::setw(12)
            << "max err dV" << std::setw(7) << "check" << std::setw(13) << "peak memory" << std::setw(15)
            << "HBM traffic"
            << "\n";
  int failures = 0;
  for (const BackwardLine& line : lines) {
    std::cout << std::left << std::setw(26) << line.step << std::right;
    if (!line.report) {
      std::cout << "  " << line.why_not << "\n";
      continue;
    }
    const common::BackwardReport& b = *line.report;
    const bool ok = b.verdict && b.verdict->passed;
    failures += ok ? 0 : 1;
    std::cout << std::setw(11) << fixed(b.time_ms, 2) << std::setw(10) << fixed(b.tflops, 3) << std::setw(12)
              << sci(b.verdict->errors.dq) << std::setw(12) << sci(b.verdict->errors.dk) << std::setw(12)
              << sci(b.verdict->errors.dv) << std::setw(7) << (ok ? "pass" : "FAIL") << std::setw(13)
              << common::format_bytes(double(b.gradients.peak_bytes)) << std::setw(15) << traffic(b.gradients.traffic)
              << "\n";
  }
  return failures;
}

}  // namespace

/// Runs the tour; see the file comment for the options.
int main(int argc, char** argv) {
  return common::guarded_main("tour", [&]() -> int {
    common::cli::ProblemSpec spec;
    int64_t max_seconds = 60;
    CLI::App app("The tour: every built step on the same problem, checked against the fp64 reference.", "tour");
    common::cli::add_problem_options(app, spec, {.seq_shorthand = true, .files = false});
    common::cli::add_int_option(app, "--max-seconds", max_seconds, 1, 1000000,
                                "skip a step estimated to take longer than this (default 60)", "S");
    app.footer("Exit codes: 0 every step that ran passed, 1 a check failed, 2 bad option or input.");
    if (!common::cli::parse(app, argc, argv)) return 0;  // --help
    common::validate(spec.shape);  // before any tensor is allocated
    const common::Shape& shape = spec.shape;
    common::RunSettings settings;
    settings.check = true;
    settings.repeat = 3;
    settings.time_budget_s = 2;  // the thread simulator of step 3 takes seconds per run
    settings.progress = isatty(STDERR_FILENO);

    const common::Problem problem = common::make_random_problem(shape, spec.causal, spec.scale, spec.seed);
    const std::vector<float> d_o = common::make_random_upstream(shape, spec.seed);  // for the backward steps
    std::cout << "The tour: every step on " << common::describe(shape) << (spec.causal ? " causal" : "")
              << ", each step in its own precision (fp32; bf16 from step 9 on), checked against the fp64 reference\n"
              << "under FlashAttention-2's rule in that precision.\n"
              << "Time: median of up to 3 runs after the checked one (wall clock on the CPU, kernel only on the "
                 "GPU).\n\n";
    std::cout << std::left << std::setw(26) << "step" << std::right << std::setw(11) << "time (ms)" << std::setw(10)
              << "TFLOP/s" << std::setw(11) << "max err O" << std::setw(11) << "max err L" << std::setw(7) << "check"
              << std::setw(13) << "peak memory" << std::setw(15) << "HBM traffic"
              << "\n";
    int failures = 0;
    std::vector<BackwardLine> backward_lines;
    for (const common::StepInfo& step : tour::built_steps()) {
      std::cout << std::left << std::setw(26) << step.name << std::right << std::flush;
      common::RunSettings in_own = settings;  // a bf16/fp16 step runs and is judged in its own precision
      in_own.precision = step.precisions.front();
      in_own.backward = bool(step.backward);  // a backward step: its forward, then its backward
      if (in_own.backward) backward_lines.push_back({step.name, std::nullopt, ""});
      const auto not_run = [&](const std::string& why) {
        std::cout << "  " << why << "\n";
        if (in_own.backward) backward_lines.back().why_not = why;
      };
      const double eta = common::estimated_seconds(step, shape, spec.causal, in_own);
      if (eta > double(max_seconds)) {
        not_run("skipped: about " + common::format_duration(eta) + " at this size (--max-seconds " +
                std::to_string(max_seconds) + "; run build/bin/" + step.name + " alone to wait for it)");
        continue;
      }
      try {
        common::require_head_dim(shape.head_dim, step.head_dims, step.name);
        common::require_host_memory(step, shape, settings.check, in_own.backward);
        const common::RunReport r = common::run_step(step, problem, in_own, in_own.backward ? &d_o : nullptr);
        const bool ok = r.verdict && r.verdict->passed;
        failures += ok ? 0 : 1;
        if (r.backward) backward_lines.back().report = r.backward;
        std::cout << std::setw(11) << fixed(r.time_ms, 2) << std::setw(10) << fixed(r.tflops, 3) << std::setw(11)
                  << sci(r.verdict->errors.max_err_o) << std::setw(11) << sci(r.verdict->errors.max_err_lse)
                  << std::setw(7) << (ok ? "pass" : "FAIL") << std::setw(13)
                  << common::format_bytes(double(r.result.peak_bytes)) << std::setw(15) << traffic(r.result.traffic)
                  << "\n";
      } catch (const common::NoGpuError&) {
        not_run("needs a GPU (none found on this machine)");
      } catch (const common::InputError& e) {
        not_run(std::string("cannot run this problem: ") + e.what());
      }
    }
    for (const std::string& name : tour::unbuilt_steps()) {
      std::cout << std::left << std::setw(26) << name
                << "  not built here (a CUDA step: nvcc builds it, a GPU runs it)\n";
    }
    if (!backward_lines.empty()) failures += print_backward(backward_lines);
    std::cout << "\npeak memory: working memory beyond inputs and outputs; HBM traffic: counted by the\n"
                 "steps that model it. A backward step's row in the first table is its forward: the kernel\n"
                 "of the step it extends.\n"
                 "Run any step alone: build/bin/<step> --help (a backward step: --backward --check)\n";
    common::flush_stdout();
    return failures == 0 ? 0 : 1;
  });
}
