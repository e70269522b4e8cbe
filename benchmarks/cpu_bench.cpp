/// \file cpu_bench.cpp
/// \brief CPU benchmark: step02 (FlashAttention-1 on the CPU) against step01 (standard attention).
///
/// Usage: build/bin/cpu_bench [--csv FILE] [--repeat R] [--heads H] [--max-seq N]
/// Both steps run side by side in the same process on the same inputs:
/// B=1, H=4 by default, d=64, N_q = N_kv in {512, 1024, 2048, 4096, 8192}, not causal.
/// Time is the median of R wall-clock runs after a warm-up, single-threaded.
#include <fstream>
#include <iomanip>
#include <iostream>
#include <string>

#include "common/driver.hpp"
#include "common/fixtures.hpp"
#include "step01_naive/attention.hpp"
#include "step02_tiled_cpu/attention.hpp"

/// Runs the benchmark; see the file comment for the options.
int main(int argc, char** argv) {
  std::string csv_path = "cpu_bench.csv";
  int repeat = 3;
  int64_t heads = 4, max_seq = 8192;
  for (int i = 1; i < argc; ++i) {
    const std::string opt = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "cpu_bench: error: unknown option or missing value '" << opt
                << "' (use --csv FILE, --repeat R, --heads H, --max-seq N)\n";
      return 2;
    }
    const std::string value = argv[++i];
    try {
      if (opt == "--csv") csv_path = value;
      else if (opt == "--repeat") repeat = std::stoi(value);
      else if (opt == "--heads") heads = std::stoll(value);
      else if (opt == "--max-seq") max_seq = std::stoll(value);
      else throw std::invalid_argument(opt);
    } catch (const std::exception&) {
      std::cerr << "cpu_bench: error: bad option '" << opt << " " << value
                << "' (use --csv FILE, --repeat R>=1, --heads H>=1, --max-seq N)\n";
      return 2;
    }
    if (repeat < 1 || heads < 1) {
      std::cerr << "cpu_bench: error: --repeat and --heads must be >= 1\n";
      return 2;
    }
  }
  std::ofstream csv(csv_path);
  if (!csv) {
    std::cerr << "cpu_bench: error: cannot write " << csv_path << "\n";
    return 2;
  }
  csv << "step,batch,heads,seq,head_dim,causal,time_ms,tflops,peak_bytes,runs\n";
  std::cout << "CPU benchmark: B=1 H=" << heads << " d=64, not causal, fp32, one thread; median of "
            << repeat << " runs after a warm-up\n\n"
            << std::setw(6) << "N" << std::setw(14) << "step01 ms" << std::setw(14) << "step02 ms"
            << std::setw(10) << "02/01" << std::setw(12) << "01 TFLOP/s" << std::setw(12) << "02 TFLOP/s"
            << std::setw(13) << "01 memory" << std::setw(13) << "02 memory" << std::setw(10) << "02/01"
            << "\n";
  for (int64_t n : {512, 1024, 2048, 4096, 8192}) {
    if (n > max_seq) break;
    const common::Problem p = common::make_random_problem(common::Shape{1, heads, n, n, 64}, false, 0.0f, 42);
    common::RunSettings settings;
    settings.repeat = repeat;
    common::RunReport r[2];
    const common::StepInfo steps[2] = {step01::describe(), step02::describe()};
    for (int s = 0; s < 2; ++s) {
      r[s] = common::run_step(steps[s], p, settings);
      csv << steps[s].name << ",1," << heads << "," << n << ",64,0," << r[s].time_ms << "," << r[s].tflops
          << "," << r[s].result.peak_bytes << "," << r[s].timed_runs << "\n";
    }
    std::cout << std::fixed << std::setw(6) << n << std::setprecision(1) << std::setw(14) << r[0].time_ms
              << std::setw(14) << r[1].time_ms << std::setprecision(2) << std::setw(10)
              << r[1].time_ms / r[0].time_ms << std::setprecision(4) << std::setw(12) << r[0].tflops
              << std::setw(12) << r[1].tflops << std::setw(13)
              << common::format_bytes(double(r[0].result.peak_bytes)) << std::setw(13)
              << common::format_bytes(double(r[1].result.peak_bytes)) << std::setprecision(3)
              << std::setw(10) << double(r[1].result.peak_bytes) / double(r[0].result.peak_bytes) << "\n"
              << std::flush;
  }
  std::cout << "\nCSV written to " << csv_path << "\n";
  return 0;
}
