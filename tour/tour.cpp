/// \file tour.cpp
/// \brief The tour: every built step on the same problem, one table.
///
/// Usage: build/bin/tour [--seq N] [--heads H] [--head-dim D] [--causal]
/// Default problem: B=1, H=4, N_q = N_kv = 512, d=64 (small enough for the
/// thread simulator of step 3, large enough to show the memory difference).
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>

#include "common/driver.hpp"
#include "common/fixtures.hpp"
#include "tour_steps.hpp"

namespace {

std::string sci(double x) {
  std::ostringstream out;
  out << std::scientific << std::setprecision(1) << x;
  return out.str();
}

int64_t parse(const char* option, const char* text) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used == std::string(text).size() && v >= 1 && v <= (1 << 20)) return v;
  } catch (const std::exception&) {
  }
  throw common::InputError(std::string(option) + " needs an integer in [1, 1048576], got '" + text + "'");
}

}  // namespace

/// Runs the tour; see the file comment for the options.
int main(int argc, char** argv) {
  common::Shape shape{1, 4, 512, 512, 64};
  bool causal = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string opt = argv[i];
      const bool has_value = i + 1 < argc;
      if (opt == "--seq" && has_value) shape.seq_q = shape.seq_kv = parse("--seq", argv[++i]);
      else if (opt == "--heads" && has_value) shape.heads = parse("--heads", argv[++i]);
      else if (opt == "--head-dim" && has_value) shape.head_dim = parse("--head-dim", argv[++i]);
      else if (opt == "--causal") causal = true;
      else throw common::InputError("unknown option '" + opt + "' (use --seq N, --heads H, --head-dim D, --causal)");
    }
  } catch (const common::InputError& e) {
    std::cerr << "tour: error: " << e.what() << "\n";
    return 2;
  }

  const common::Problem problem = common::make_random_problem(shape, causal, 0.0f, 2024);
  std::cout << "The tour: every step on " << common::describe(shape) << (causal ? " causal" : "")
            << " (fp32), checked against the fp64 reference.\n"
            << "Time: median of up to 3 runs after a warm-up (wall clock on the CPU, kernel only on the GPU).\n\n";
  std::cout << std::left << std::setw(26) << "step" << std::right << std::setw(11) << "time (ms)"
            << std::setw(10) << "TFLOP/s" << std::setw(11) << "max err O" << std::setw(11)
            << "max err L" << std::setw(7) << "check" << std::setw(13) << "peak memory" << std::setw(15)
            << "HBM traffic" << "\n";
  int failures = 0;
  for (const common::StepInfo& step : tour::built_steps()) {
    std::cout << std::left << std::setw(26) << step.name << std::right << std::flush;
    try {
      common::RunSettings settings;
      settings.check = true;
      settings.repeat = 3;
      settings.time_budget_s = 2;  // the thread simulator of step 3 takes seconds per run
      const common::RunReport r = common::run_step(step, problem, settings);
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
    } catch (const std::exception& e) {
      std::cout << "  error: " << e.what() << "\n";
      ++failures;
    }
  }
  for (const std::string& name : tour::unbuilt_steps()) {
    std::cout << std::left << std::setw(26) << name << "  not built (no CUDA compiler; needs a GPU)\n";
  }
  std::cout << "\npeak memory: working memory beyond inputs and outputs; HBM traffic: counted by the\n"
               "steps that model it. Run any step alone: build/bin/<step> --help\n";
  return failures == 0 ? 0 : 1;
}
