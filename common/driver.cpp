/// \file driver.cpp
/// \brief Command line, run, check, time, report: shared by every step's program.
#include "common/driver.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "common/fixtures.hpp"
#include "common/npy.hpp"
#include "common/workspace.hpp"

namespace common {

double attention_flops(const Shape& s, bool causal) {
  const double full = 4.0 * double(s.batch_heads()) * double(s.seq_q) * double(s.seq_kv) *
                      double(s.head_dim);
  return causal ? full / 2 : full;
}

double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  return n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(u == 0 ? 0 : 1) << bytes << ' ' << units[u];
  return out.str();
}

RunReport run_step(const StepInfo& step, const Problem& problem, const RunSettings& settings) {
  validate(problem);
  require_head_dim(problem.shape.head_dim, step.head_dims, step.name);
  Options options;
  options.sram_floats = settings.sram_floats > 0 ? settings.sram_floats : step.default_sram_floats;
  options.trace = settings.trace;
  options.progress = settings.progress;

  RunReport report;
  using clock = std::chrono::steady_clock;
  WorkspaceCounter::reset_peak();
  const auto start = clock::now();
  report.result = step.forward(problem, options);
  const double first_ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
  report.result.peak_bytes = std::max(report.result.peak_bytes,
                                      WorkspaceCounter::peak() - WorkspaceCounter::live());

  if (settings.check) report.verdict = check_result(problem, report.result);

  // Validate, then time: the first run above was the warm-up.
  options.trace = nullptr;
  if (settings.repeat <= 0) {
    report.time_ms = first_ms;
    report.timed_runs = 1;
  } else if (step.needs_gpu) {
    options.repeat = settings.repeat;
    const Result timed = step.forward(problem, options);
    report.time_ms = median(timed.kernel_ms);
    report.timed_runs = static_cast<int>(timed.kernel_ms.size());
    report.kernel_only = true;
  } else {
    std::vector<double> samples;
    double spent_ms = 0;
    for (int r = 0; r < settings.repeat; ++r) {
      if (settings.time_budget_s > 0 && spent_ms > 1e3 * settings.time_budget_s) break;
      const auto t0 = clock::now();
      step.forward(problem, options);
      samples.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
      spent_ms += samples.back();
    }
    report.time_ms = median(samples);
    report.timed_runs = static_cast<int>(samples.size());
  }
  report.tflops = attention_flops(problem.shape, problem.causal) / (report.time_ms * 1e-3) / 1e12;
  return report;
}

namespace {

/// Exit code for bad options or inputs.
constexpr int kExitUsage = 2;

struct ProgramArgs {
  Shape shape{1, 4, 512, 512, 64};
  bool causal = false;
  float scale = 0;  // 0 = default
  uint64_t seed = 1;
  int repeat = 1;
  bool check = false;
  bool json = false;
  bool trace = false;
  std::string load_dir;
  std::string save_dir;
  std::string fixture;
  int64_t sram_floats = 0;
  bool help = false;
};

void print_help(const StepInfo& step) {
  std::cout << step.name << " — " << step.title << "\n\n"
            << "usage: " << step.name << " [options]\n\n"
            << "problem (random inputs from --seed unless --load):\n"
            << "  --batch B        batch size (default 1)\n"
            << "  --heads H        heads (default 4)\n"
            << "  --seq-q N        query length N_q (default 512)\n"
            << "  --seq-kv N       key/value length N_kv (default 512)\n"
            << "  --head-dim D     head dimension d (default 64";
  if (!step.head_dims.empty()) {
    std::cout << "; supported:";
    for (int64_t d : step.head_dims) std::cout << ' ' << d;
  }
  std::cout << ")\n"
            << "  --causal         causal mask, top-left aligned (query i sees keys j <= i)\n"
            << "  --scale S        softmax scale (default 1/sqrt(d))\n"
            << "  --seed S         seed of the random inputs (default 1)\n"
            << "  --load DIR       read DIR/q.npy, DIR/k.npy, DIR/v.npy (float32, [B,H,N,d]);\n"
            << "                   the shape options are then taken from the files\n"
            << "  --fixture NAME   a named example instead of random inputs:\n"
            << "                   hand_worked_n2_d1 (seed 000, O = -0.88), two_by_two_m9, seed002_n16_d8\n";
  if (step.uses_sram_budget) {
    std::cout << "  --sram-floats M  on-chip budget M in floats; B_c = ceil(M/4d), B_r = min(B_c, d)\n"
              << "                   (default " << step.default_sram_floats << ")\n";
  }
  std::cout << "run and report:\n"
            << "  --check          compare O and L with the fp64 reference (exit 1 on failure)\n"
            << "  --repeat R       time R runs after a warm-up, report the median (default 1;\n"
            << "                   0 = time the single run)\n"
            << "  --json           print one JSON object instead of the table\n"
            << "  --save DIR       write DIR/o.npy and DIR/lse.npy\n"
            << "  --trace          print every step of the algorithm (tiny problems only)\n"
            << "  --help           this text\n"
            << "exit codes: 0 ok, 1 check failed, 2 bad option or input\n";
}

int64_t parse_int(const std::string& option, const std::string& text, int64_t lo, int64_t hi) {
  size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || value < lo || value > hi) {
    throw InputError(option + " needs an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "], got '" + text + "'");
  }
  return value;
}

float parse_scale(const std::string& text) {
  size_t used = 0;
  float value = 0;
  try {
    value = std::stof(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || !std::isfinite(value) || value <= 0) {
    throw InputError("--scale needs a finite number > 0, got '" + text + "'");
  }
  return value;
}

ProgramArgs parse_args(const StepInfo& step, int argc, char** argv) {
  ProgramArgs a;
  constexpr int64_t kMaxDim = int64_t{1} << 31;
  for (int i = 1; i < argc; ++i) {
    const std::string opt = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw InputError(opt + " needs a value (see --help)");
      return argv[++i];
    };
    if (opt == "--help" || opt == "-h") a.help = true;
    else if (opt == "--batch") a.shape.batch = parse_int(opt, value(), 1, kMaxDim);
    else if (opt == "--heads") a.shape.heads = parse_int(opt, value(), 1, kMaxDim);
    else if (opt == "--seq-q") a.shape.seq_q = parse_int(opt, value(), 1, kMaxDim);
    else if (opt == "--seq-kv") a.shape.seq_kv = parse_int(opt, value(), 1, kMaxDim);
    else if (opt == "--head-dim") a.shape.head_dim = parse_int(opt, value(), 1, kMaxDim);
    else if (opt == "--causal") a.causal = true;
    else if (opt == "--scale") a.scale = parse_scale(value());
    else if (opt == "--seed") a.seed = static_cast<uint64_t>(parse_int(opt, value(), 0, INT64_MAX));
    else if (opt == "--repeat") a.repeat = static_cast<int>(parse_int(opt, value(), 0, 100000));
    else if (opt == "--check") a.check = true;
    else if (opt == "--json") a.json = true;
    else if (opt == "--trace") a.trace = true;
    else if (opt == "--load") a.load_dir = value();
    else if (opt == "--save") a.save_dir = value();
    else if (opt == "--fixture") a.fixture = value();
    else if (opt == "--sram-floats" && step.uses_sram_budget) {
      a.sram_floats = parse_int(opt, value(), 1, int64_t{1} << 30);
    } else if (opt == "--sram-floats") {
      throw InputError("--sram-floats is not used by " + step.name +
                       " (its tiles do not come from an on-chip budget)");
    } else {
      throw InputError("unknown option '" + opt + "' (see --help)");
    }
  }
  validate(a.shape);  // before any tensor is allocated
  if (a.trace && a.json) throw InputError("--trace and --json cannot be combined");
  if (!a.fixture.empty() && !a.load_dir.empty()) throw InputError("--fixture and --load cannot be combined");
  if (a.trace && !step.has_trace) throw InputError(step.name + " has no --trace");
  return a;
}

// Reads q.npy, k.npy, v.npy from `dir`; each must be 4-D [B, H, N, d] and agree.
Problem load_problem(const std::string& dir, bool causal, float scale) {
  const NpyArray q = read_npy(dir + "/q.npy");
  const NpyArray k = read_npy(dir + "/k.npy");
  const NpyArray v = read_npy(dir + "/v.npy");
  for (const auto& [array, name] : {std::pair{&q, "q.npy"}, std::pair{&k, "k.npy"}, std::pair{&v, "v.npy"}}) {
    if (array->shape.size() != 4) {
      throw InputError(dir + "/" + name + ": expected 4 dimensions [B, H, N, d], got " +
                       std::to_string(array->shape.size()));
    }
  }
  if (k.shape != v.shape) throw InputError(dir + ": k.npy and v.npy must have the same shape");
  if (q.shape[0] != k.shape[0] || q.shape[1] != k.shape[1] || q.shape[3] != k.shape[3]) {
    throw InputError(dir + ": q.npy and k.npy must agree in B, H and d");
  }
  Problem p;
  p.shape = Shape{q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3]};
  p.causal = causal;
  p.scale = scale > 0 ? scale : default_scale(std::max<int64_t>(p.shape.head_dim, 1));
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  validate(p);
  return p;
}

// The named fixtures the program can run with --fixture.
Fixture find_fixture(const std::string& name) {
  for (const Fixture& f : {hand_worked_example(), two_by_two_m9(), seed002_n16_d8()}) {
    if (f.name == name) return f;
  }
  throw InputError("unknown fixture '" + name +
                   "' (known: hand_worked_n2_d1, two_by_two_m9, seed002_n16_d8)");
}

void save_result(const std::string& dir, const Shape& s, const Result& r) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError(dir + ": cannot create directory (" + ec.message() + ")");
  write_npy(dir + "/o.npy", {s.batch, s.heads, s.seq_q, s.head_dim}, r.o);
  write_npy(dir + "/lse.npy", {s.batch, s.heads, s.seq_q}, r.lse);
}

std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  std::ostringstream out;
  out << std::setprecision(9) << x;
  return out.str();
}

void print_json(const StepInfo& step, const Problem& p, const RunReport& rep) {
  const Shape& s = p.shape;
  std::ostringstream j;
  j << "{\"step\": \"" << step.name << "\", \"batch\": " << s.batch << ", \"heads\": " << s.heads
    << ", \"seq_q\": " << s.seq_q << ", \"seq_kv\": " << s.seq_kv << ", \"head_dim\": " << s.head_dim
    << ", \"causal\": " << (p.causal ? "true" : "false") << ", \"scale\": " << json_number(p.scale)
    << ", \"time_ms\": " << json_number(rep.time_ms) << ", \"timed_runs\": " << rep.timed_runs
    << ", \"kernel_only\": " << (rep.kernel_only ? "true" : "false")
    << ", \"tflops\": " << json_number(rep.tflops);
  if (rep.verdict) {
    j << ", \"max_err_o\": " << json_number(rep.verdict->errors.max_err_o)
      << ", \"max_err_lse\": " << json_number(rep.verdict->errors.max_err_lse)
      << ", \"tol_o\": " << json_number(rep.verdict->tolerance.o)
      << ", \"tol_lse\": " << json_number(rep.verdict->tolerance.lse)
      << ", \"passed\": " << (rep.verdict->passed ? "true" : "false");
  } else {
    j << ", \"max_err_o\": null, \"max_err_lse\": null, \"passed\": null";
  }
  j << ", \"peak_bytes\": " << rep.result.peak_bytes;
  if (rep.result.traffic) {
    j << ", \"hbm_read_bytes\": " << rep.result.traffic->hbm_read_bytes
      << ", \"hbm_write_bytes\": " << rep.result.traffic->hbm_write_bytes;
  }
  for (const auto& [name, value] : rep.result.extra) j << ", \"" << name << "\": " << json_number(value);
  j << "}\n";
  std::cout << j.str();
}

void print_table(const StepInfo& step, const Problem& p, const RunReport& rep) {
  const auto row = [](const std::string& name) -> std::ostream& {
    return std::cout << "  " << std::left << std::setw(26) << name << ' ';
  };
  std::cout << step.name << " — " << step.title << "\n";
  row("problem") << describe(p.shape) << (p.causal ? " causal" : "") << " scale=" << p.scale << "\n";
  std::ostringstream how;
  how << (rep.kernel_only ? "kernel only, CUDA events" : "wall clock") << ", median of "
      << rep.timed_runs << (rep.timed_runs == 1 ? " run" : " runs");
  row("time") << std::fixed << std::setprecision(3) << rep.time_ms << " ms (" << how.str() << ")\n";
  row("TFLOP/s") << std::setprecision(4) << rep.tflops << "\n" << std::defaultfloat;
  row("peak working memory") << format_bytes(double(rep.result.peak_bytes)) << " (beyond inputs and outputs)\n";
  if (rep.result.traffic) {
    row("HBM traffic") << "read " << format_bytes(double(rep.result.traffic->hbm_read_bytes))
                       << ", written " << format_bytes(double(rep.result.traffic->hbm_write_bytes))
                       << " (" << rep.result.traffic->hbm_read_bytes + rep.result.traffic->hbm_write_bytes
                       << " bytes)\n";
  }
  for (const auto& [name, value] : rep.result.extra) row(name) << std::setprecision(10) << value << "\n";
  if (rep.verdict) {
    const Verdict& v = *rep.verdict;
    std::cout << std::scientific << std::setprecision(2);
    row("max |O - O_ref|") << v.errors.max_err_o << "  (tolerance " << v.tolerance.o << ")\n";
    row("max |L - L_ref|") << v.errors.max_err_lse << "  (tolerance " << v.tolerance.lse << ")\n";
    std::cout << std::defaultfloat;
    row("check") << (v.passed ? "PASS" : "FAIL")
                 << " (tolerance = 2 x fp32 standard attention's error + 1e-6)\n";
  }
}

}  // namespace

int run_program(const StepInfo& step, int argc, char** argv) {
  try {
    const ProgramArgs args = parse_args(step, argc, argv);
    if (args.help) {
      print_help(step);
      return 0;
    }
    Problem problem;
    int64_t sram_floats = args.sram_floats;
    if (!args.fixture.empty()) {
      const Fixture f = find_fixture(args.fixture);
      problem = f.problem;
      problem.causal = args.causal;
      if (args.scale > 0) problem.scale = args.scale;
      if (sram_floats == 0 && step.uses_sram_budget) sram_floats = f.sram_floats;
    } else if (!args.load_dir.empty()) {
      problem = load_problem(args.load_dir, args.causal, args.scale);
    } else {
      problem = make_random_problem(args.shape, args.causal, args.scale, args.seed);
    }
    validate(problem);
    require_head_dim(problem.shape.head_dim, step.head_dims, step.name);
    const Shape& s = problem.shape;
    if (args.trace && s.batch_heads() * s.seq_q * s.seq_kv > 4096) {
      throw InputError("--trace prints every tile: use a tiny problem (B*H*N_q*N_kv <= 4096)");
    }
    RunSettings settings;
    settings.check = args.check;
    settings.repeat = args.repeat;
    settings.sram_floats = sram_floats;
    settings.trace = args.trace ? &std::cout : nullptr;
    settings.progress = !args.json && isatty(STDERR_FILENO);
    const RunReport report = run_step(step, problem, settings);
    if (!args.save_dir.empty()) save_result(args.save_dir, s, report.result);
    if (args.json) {
      print_json(step, problem, report);
    } else {
      print_table(step, problem, report);
    }
    return report.verdict && !report.verdict->passed ? 1 : 0;
  } catch (const InputError& e) {
    std::cerr << step.name << ": error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const NoGpuError& e) {
    std::cerr << step.name << ": error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    std::cerr << step.name << ": error: out of host memory for this problem; use smaller sizes\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << step.name << ": error: " << e.what() << "\n";
    return 3;
  }
}

}  // namespace common
