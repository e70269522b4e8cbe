/// \file cpu_bench.cpp
/// \brief CPU benchmark: step02 (FlashAttention-1 on the CPU) against step01 (standard attention).
///
/// Usage: build/bin/cpu_bench [--csv FILE] [--repeat R] [--heads H] [--max-seq N]   (`--help`)
/// Both steps run side by side in the same process on the same inputs:
/// B=1, H=4 by default, d=64, N_q = N_kv in {512, 1024, 2048, 4096, 8192}, not causal.
/// Time is the median of R wall-clock runs after a warm-up, single-threaded.
/// The CSV is written when every row is measured (whole, or not at all).
#include <unistd.h>

#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>

#include "common/cli.hpp"
#include "common/driver.hpp"
#include "common/fixtures.hpp"
#include "common/output_file.hpp"
#include "step01_naive/attention.hpp"
#include "step02_tiled_cpu/attention.hpp"

/// Runs the benchmark; see the file comment for the options.
int main(int argc, char** argv) {
  return common::guarded_main("cpu_bench", [&]() -> int {
    std::string csv_path = "cpu_bench.csv";
    int repeat = 3;
    int64_t heads = 4, max_seq = 8192;
    CLI::App app("CPU benchmark: step02 (FlashAttention-1 on the CPU) against step01 (standard attention).",
                 "cpu_bench");
    common::cli::add_csv_option(app, csv_path, "write the table as CSV to FILE (default cpu_bench.csv)");
    common::cli::add_repeat_option(app, repeat, 1, "timed runs per entry after a warm-up (1 … 100000, default 3)");
    common::cli::add_int_option(app, "--heads", heads, 1, common::cli::kMaxDim, "heads H (default 4)", "H");
    common::cli::add_int_option(app, "--max-seq", max_seq, 512, 8192,
                                "longest N of 512, 1024, 2048, 4096, 8192 to run (512 … 8192, default 8192)", "N");
    app.footer("Exit codes: 0 ok, 2 bad option, too large for this machine, or a failed write.");
    if (!common::cli::parse(app, argc, argv)) return 0;  // --help
    const common::StepInfo steps[2] = {step01::describe(), step02::describe()};
    // Refuse up front what cannot fit or would take very long, before the first row.
    double seconds = 0;
    for (int64_t n : {512, 1024, 2048, 4096, 8192}) {
      if (n > max_seq) break;
      const common::Shape shape{1, heads, n, n, 64};
      common::validate(shape);
      common::RunSettings settings;
      settings.repeat = repeat;
      for (const common::StepInfo& step : steps) {
        common::require_host_memory(step, shape, false);
        seconds += common::estimated_seconds(step, shape, false, settings);
      }
    }
    common::check_writable(csv_path);
    if (seconds > 10) std::cerr << "cpu_bench: this will take about " << common::format_duration(seconds) << "\n";

    std::ostringstream csv;
    csv << "step,batch,heads,seq,head_dim,causal,time_ms,tflops,peak_bytes,runs\n";
    std::cout << "CPU benchmark: B=1 H=" << heads << " d=64, not causal, fp32, one thread; median of " << repeat
              << " runs after a warm-up\n\n"
              << std::setw(6) << "N" << std::setw(14) << "step01 ms" << std::setw(14) << "step02 ms" << std::setw(10)
              << "02/01" << std::setw(12) << "01 TFLOP/s" << std::setw(12) << "02 TFLOP/s" << std::setw(13)
              << "01 memory" << std::setw(13) << "02 memory" << std::setw(10) << "02/01"
              << "\n";
    for (int64_t n : {512, 1024, 2048, 4096, 8192}) {
      if (n > max_seq) break;
      const common::Problem p = common::make_random_problem(common::Shape{1, heads, n, n, 64}, false, std::nullopt, 42);
      common::RunSettings settings;
      settings.repeat = repeat;
      settings.progress = isatty(STDERR_FILENO);
      common::RunReport r[2];
      for (int s = 0; s < 2; ++s) {
        r[s] = common::run_step(steps[s], p, settings);
        csv << steps[s].name << ",1," << heads << "," << n << ",64,0," << r[s].time_ms << "," << r[s].tflops << ","
            << r[s].result.peak_bytes << "," << r[s].timed_runs << "\n";
      }
      std::cout << std::fixed << std::setw(6) << n << std::setprecision(1) << std::setw(14) << r[0].time_ms
                << std::setw(14) << r[1].time_ms << std::setprecision(2) << std::setw(10) << r[1].time_ms / r[0].time_ms
                << std::setprecision(4) << std::setw(12) << r[0].tflops << std::setw(12) << r[1].tflops << std::setw(13)
                << common::format_bytes(double(r[0].result.peak_bytes)) << std::setw(13)
                << common::format_bytes(double(r[1].result.peak_bytes)) << std::setprecision(3) << std::setw(10)
                << double(r[1].result.peak_bytes) / double(r[0].result.peak_bytes) << "\n"
                << std::flush;
    }
    common::write_file(csv_path, csv.str());
    std::cout << "\nCSV written to " << csv_path << "\n";
    common::flush_stdout();
    return 0;
  });
}
