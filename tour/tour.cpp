/// \file tour.cpp
/// \brief The tour: every built step on the same problem, one table.
///
/// Usage: build/bin/tour [--seq N] [--heads H] [--head-dim D] [--causal] … (`--help`)
/// Default problem: B=1, H=4, N_q = N_kv = 512, d=64 (small enough for the
/// thread simulator of step 3, large enough to show the memory difference).
/// A step that cannot run this problem (a head dimension it was not compiled
/// for, no GPU) is listed with the reason; a step estimated to take longer
/// than --max-seconds is listed as skipped, with the estimate.
#include <unistd.h>

#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>

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
    std::cout << "The tour: every step on " << common::describe(shape) << (spec.causal ? " causal" : "")
              << ", each step in its own precision (fp32; bf16 from step 9 on), checked against the fp64 reference\n"
              << "under FlashAttention-2's rule in that precision.\n"
              << "Time: median of up to 3 runs after the checked one (wall clock on the CPU, kernel only on the "
                 "GPU).\n\n";
    std::cout << std::left << std::setw(26) << "step" << std::right << std::setw(11) << "time (ms)" << std::setw(10)
              << "TFLOP/s" << std::setw(11) << "max err O" << std::setw(11) << "max err L" << std::setw(7)
              << "check" << std::setw(13) << "peak memory" << std::setw(15) << "HBM traffic"
              << "\n";
    int failures = 0;
    for (const common::StepInfo& step : tour::built_steps()) {
      std::cout << std::left << std::setw(26) << step.name << std::right << std::flush;
      const double eta = common::estimated_seconds(step, shape, spec.causal, settings);
      if (eta > double(max_seconds)) {
        std::cout << "  skipped: about " << common::format_duration(eta) << " at this size (--max-seconds "
                  << max_seconds << "; run build/bin/" << step.name << " alone to wait for it)\n";
        continue;
      }
      try {
        common::require_head_dim(shape.head_dim, step.head_dims, step.name);
        common::require_host_memory(step, shape, settings.check);
        common::RunSettings in_own = settings;  // a bf16/fp16 step runs and is judged in its own precision
        in_own.precision = step.precisions.front();
        const common::RunReport r = common::run_step(step, problem, in_own);
        const bool ok = r.verdict && r.verdict->passed;
        failures += ok ? 0 : 1;
        std::ostringstream time, tflops;
        time << std::fixed << std::setprecision(2) << r.time_ms;
        tflops << std::fixed << std::setprecision(3) << r.tflops;
        std::cout << std::setw(11) << time.str() << std::setw(10) << tflops.str() << std::setw(11)
                  << sci(r.verdict->errors.max_err_o) << std::setw(11) << sci(r.verdict->errors.max_err_lse)
                  << std::setw(7) << (ok ? "pass" : "FAIL") << std::setw(13)
                  << common::format_bytes(double(r.result.peak_bytes)) << std::setw(15)
                  << (r.result.traffic ? common::format_bytes(double(r.result.traffic->hbm_read_bytes +
                                                                     r.result.traffic->hbm_write_bytes))
                                       : std::string("-"))
                  << "\n";
      } catch (const common::NoGpuError&) {
        std::cout << "  needs a GPU (none found on this machine)\n";
      } catch (const common::InputError& e) {
        std::cout << "  cannot run this problem: " << e.what() << "\n";
      }
    }
    for (const std::string& name : tour::unbuilt_steps()) {
      std::cout << std::left << std::setw(26) << name << "  not built (no CUDA compiler; needs a GPU)\n";
    }
    std::cout << "\npeak memory: working memory beyond inputs and outputs; HBM traffic: counted by the\n"
                 "steps that model it. Run any step alone: build/bin/<step> --help\n";
    common::flush_stdout();
    return failures == 0 ? 0 : 1;
  });
}
