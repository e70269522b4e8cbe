/// \file driver.cpp
/// \brief Command line, run, check, time, report: shared by every step's program.
#include "common/driver.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/fixtures.hpp"
#include "common/npy.hpp"
#include "common/output_file.hpp"
#include "common/workspace.hpp"

namespace common {

double attention_flops(const Shape& s, bool causal) {
  const double full = 4.0 * double(s.batch_heads()) * double(s.seq_q) * double(s.seq_kv) * double(s.head_dim);
  return causal ? full / 2 : full;
}

double attention_backward_flops(const Shape& s, bool causal) {
  constexpr double kBackwardOverForward = 2.5;
  return kBackwardOverForward * attention_flops(s, causal);
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

std::string format_duration(double seconds) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(seconds < 600 ? 0 : 1);
  if (seconds < 120) {
    out << seconds << " s";
  } else if (seconds < 7200) {
    out << seconds / 60 << " min";
  } else if (seconds < 3 * 86400) {
    out << seconds / 3600 << " h";
  } else {
    out << seconds / 86400 << " days";
  }
  return out.str();
}

namespace {

/// The fp64 reference and the three fp32 baselines of the check, in plain
/// loops: together about a quarter of this rate in FLOP/s on one core
/// (measured on the CI machine: 0.7 s at B·H = 4, N = 1024, d = 64).
constexpr double kCheckFlopsPerSecond = 5e9;

/// Largest number of values --trace may print (it prints every tile).
constexpr int64_t kMaxTraceValues = 16384;

}  // namespace

int64_t count_nonfinite(const Result& r) {
  int64_t n = 0;
  for (float x : r.o) n += std::isfinite(x) ? 0 : 1;
  for (float x : r.lse) n += std::isfinite(x) ? 0 : 1;
  return n;
}

std::string nonfinite_message(const Result& result) {
  const int64_t nonfinite = count_nonfinite(result);
  if (nonfinite == 0) return "";
  return std::to_string(nonfinite) + " of " + std::to_string(result.o.size() + result.lse.size()) +
         " outputs are not finite: these inputs overflow float32 inside the step "
         "(scores scale*q.k or sums of V beyond 3.4e38)";
}

namespace {

/// Times `repeat` runs of `timed_run_ms` (at most `budget_s` seconds of them when
/// positive, at least one) after the samples already in `samples`; the median.
template <class TimedRun>
double time_runs(std::vector<double>& samples, int repeat, double budget_s, TimedRun timed_run_ms) {
  double spent_ms = 0;
  for (int r = 0; r < repeat; ++r) {
    if (budget_s > 0 && !samples.empty() && spent_ms > 1e3 * budget_s) break;
    samples.push_back(timed_run_ms());
    spent_ms += samples.back();
  }
  return median(samples);
}

/// The backward half of run_step, on the forward's O and L.
BackwardReport run_backward(const StepInfo& step, const Problem& problem, const Result& forward,
                            const std::vector<float>& d_o, const RunSettings& settings, const Options& options) {
  BackwardInputs inputs{forward.o, forward.lse, d_o};
  BackwardReport report;
  WorkspaceCounter::reset_peak();
  const int64_t live_before = WorkspaceCounter::live();
  const std::unique_ptr<BackwardSession> session = open_backward_session(step, problem, inputs, options);
  std::vector<double> samples;
  if (settings.repeat <= 0) {
    samples.push_back(session->timed_run_ms());
  } else {
    session->run();
  }
  report.gradients = session->gradients();
  report.gradients.peak_bytes = std::max(report.gradients.peak_bytes, WorkspaceCounter::peak() - live_before);
  report.nonfinite = count_nonfinite(report.gradients);
  if (settings.check) report.verdict = check_gradients(problem, d_o, report.gradients, settings.precision, &forward.o);
  report.time_ms = time_runs(samples, settings.repeat, settings.time_budget_s, [&] { return session->timed_run_ms(); });
  report.timed_runs = static_cast<int>(samples.size());
  report.kernel_only = session->kernel_only();
  report.tflops = attention_backward_flops(problem.shape, problem.causal) / (report.time_ms * 1e-3) / 1e12;
  return report;
}

}  // namespace

RunReport run_step(const StepInfo& step, const Problem& problem, const RunSettings& settings,
                   const std::vector<float>* d_o) {
  Options options;
  options.sram_floats = settings.sram_floats;
  options.trace = settings.trace;
  options.progress = settings.progress;
  options.precision = settings.precision;
  options.deterministic = settings.deterministic;
  if (settings.backward && (!step.backward || !d_o)) throw InputError(step.name + " has no backward pass");

  RunReport report;
  WorkspaceCounter::reset_peak();
  const int64_t live_before = WorkspaceCounter::live();
  const std::unique_ptr<Session> session = open_session(step, problem, options);
  std::vector<double> samples;
  if (settings.repeat <= 0) {
    samples.push_back(session->timed_run_ms());  // the only run is the timed one
  } else {
    session->run();  // the checked run, and the warm-up of the timed ones
  }
  report.result = session->result();
  report.result.peak_bytes = std::max(report.result.peak_bytes, WorkspaceCounter::peak() - live_before);
  report.nonfinite = count_nonfinite(report.result);

  // Validate, then time.
  if (settings.check) report.verdict = check_result(problem, report.result, settings.precision);
  report.time_ms = time_runs(samples, settings.repeat, settings.time_budget_s, [&] { return session->timed_run_ms(); });
  report.timed_runs = static_cast<int>(samples.size());
  report.kernel_only = session->kernel_only();
  report.tflops = attention_flops(problem.shape, problem.causal) / (report.time_ms * 1e-3) / 1e12;
  if (settings.backward) {
    options.trace = settings.trace;  // the backward's own trace, where the step has one
    report.backward = run_backward(step, problem, report.result, *d_o, settings, options);
  }
  return report;
}

/// The named fixture `name` (for --fixture); throws InputError naming the known ones.
Fixture find_fixture(const std::string& name) {
  for (const Fixture& f : {hand_worked_example(), two_by_two_m9(), seed002_n16_d8()}) {
    if (f.name == name) return f;
  }
  throw InputError("unknown fixture '" + name + "' (known: hand_worked_n2_d1, two_by_two_m9, seed002_n16_d8)");
}

namespace {

// Reads q.npy, k.npy, v.npy from `dir`; each must be 4-D [B, H, N, d] and agree (shape_of).
Problem load_problem(const std::string& dir, bool causal, std::optional<float> scale) {
  const NpyArray q = read_npy(dir + "/q.npy");
  const NpyArray k = read_npy(dir + "/k.npy");
  const NpyArray v = read_npy(dir + "/v.npy");
  Problem p;
  p.shape = shape_of(q.shape, k.shape, v.shape, {dir + "/q.npy", dir + "/k.npy", dir + "/v.npy"});
  p.causal = causal;
  p.scale = scale ? *scale : default_scale(p.shape.head_dim);
  require_finite(q.data, p.shape, p.shape.seq_q, dir + "/q.npy");
  require_finite(k.data, p.shape, p.shape.seq_kv, dir + "/k.npy");
  require_finite(v.data, p.shape, p.shape.seq_kv, dir + "/v.npy");
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  return p;
}

}  // namespace

Problem make_problem(const cli::ProblemSpec& spec, const StepInfo& step, int64_t* sram_floats) {
  Problem problem;
  if (!spec.fixture.empty()) {
    const Fixture f = find_fixture(spec.fixture);
    problem = f.problem;
    problem.causal = spec.causal;
    if (spec.scale) problem.scale = *spec.scale;
    if (sram_floats && *sram_floats == 0 && step.uses_sram_budget) *sram_floats = f.sram_floats;
  } else if (!spec.load_dir.empty()) {
    problem = load_problem(spec.load_dir, spec.causal, spec.scale);
  } else {
    validate(spec.shape);  // before any tensor is allocated
    problem = make_random_problem(spec.shape, spec.causal, spec.scale, spec.seed);
  }
  validate(problem);
  return problem;
}

std::vector<float> make_upstream(const cli::ProblemSpec& spec, const Problem& problem) {
  const Shape& s = problem.shape;
  if (!spec.fixture.empty()) return std::vector<float>(static_cast<size_t>(s.q_elements()), 1.0f);
  if (spec.load_dir.empty()) return make_random_upstream(s, spec.seed);
  const std::string path = spec.load_dir + "/do.npy";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return make_random_upstream(s, spec.seed);
  const NpyArray d_o = read_npy(path);
  const std::vector<int64_t> want{s.batch, s.heads, s.seq_q, s.head_dim};
  if (d_o.shape != want) {
    std::ostringstream msg;
    msg << path << " has shape [";
    for (size_t i = 0; i < d_o.shape.size(); ++i) msg << (i ? ", " : "") << d_o.shape[i];
    msg << "] but O is [" << s.batch << ", " << s.heads << ", " << s.seq_q << ", " << s.head_dim << "]";
    throw InputError(msg.str());
  }
  require_finite(d_o.data, s, s.seq_q, path);
  return d_o.data;
}

void require_host_memory(const StepInfo& step, const Shape& s, bool check, bool backward) {
  const double f = sizeof(float);
  double bytes = f * double(2 * s.q_elements() + 2 * s.kv_elements() + s.lse_elements());
  if (step.name == "step01_naive") bytes += f * double(s.seq_q) * double(s.seq_kv);  // S, the whole matrix
  if (check) bytes += (8 + f) * double(s.q_elements() + s.lse_elements());  // fp64 reference + fp32 baseline
  if (backward) {
    bytes += f * double(2 * s.q_elements() + 2 * s.kv_elements());  // dO, dQ, dK, dV
    // Checked: the fp64 gradients and the floor's magnitudes, and a baseline's float gradients.
    if (check) bytes += (8 + f) * double(s.q_elements() + 2 * s.kv_elements()) + 16 * double(s.kv_elements());
  }
  double limit = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  struct rlimit as {};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) limit = std::min(limit, double(as.rlim_cur));
  if (limit > 0 && bytes > limit) {
    throw InputError("this problem needs about " + format_bytes(bytes) + " of host memory and " + format_bytes(limit) +
                     " is available; use smaller sizes");
  }
}

double estimated_seconds(const StepInfo& step, const Shape& s, bool causal, const RunSettings& settings) {
  const double flops = attention_flops(s, causal);
  // Every score also costs an exp, a max and a sum, worth about 16 FLOPs at
  // d = 1: without that term a run with a small d would be estimated far too short.
  const double work = flops * double(s.head_dim + 16) / double(s.head_dim);
  double seconds = 0;
  if (step.cpu_flops_per_s > 0) {
    const double run = work / step.cpu_flops_per_s;
    double timed = run * std::max(settings.repeat, 0);  // the runs after the checked one
    if (settings.time_budget_s > 0 && settings.repeat > 0) timed = std::min(timed, settings.time_budget_s + run);
    seconds += run + timed;
  }
  if (settings.check) seconds += 4 * work / kCheckFlopsPerSecond;  // reference + three baselines
  // The backward is 2.5 forwards of work, in the step and in its check alike.
  if (settings.backward) seconds *= 1 + attention_backward_flops(s, causal) / flops;
  return seconds;
}

int guarded_main(const std::string& name, const std::function<int()>& body) {
  constexpr int kExitUsage = 2;
  try {
    return body();
  } catch (const InputError& e) {
    std::cerr << name << ": error: " << e.what() << "\n";
  } catch (const NoGpuError& e) {
    std::cerr << name << ": error: " << e.what() << "\n";
  } catch (const OutputError& e) {
    std::cerr << name << ": error: " << e.what() << "\n";
  } catch (const std::bad_alloc&) {
    std::cerr << name << ": error: out of host memory for this problem; use smaller sizes\n";
  } catch (const std::exception& e) {
    std::cerr << name << ": error: " << e.what() << "\n";
    return 3;
  } catch (...) {
    std::cerr << name << ": error: unknown failure\n";
    return 3;
  }
  return kExitUsage;
}

namespace {

/// The --save directory: created if missing (and removed again if the save
/// fails), checked before the run so that a long run does not end in a refusal.
class SaveDir {
 public:
  SaveDir(std::string dir, bool backward) : dir_(std::move(dir)), backward_(backward) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(dir_, ec))) {
      fs::create_directories(dir_, ec);
      if (ec) throw OutputError(dir_ + ": cannot create directory (" + ec.message() + ")");
      created_ = true;
    } else if (!fs::is_directory(dir_, ec)) {
      throw OutputError(dir_ + ": exists and is not a directory");
    }
    for (const char* name : kNames) {
      if (backward_ || std::string(name) == "o" || std::string(name) == "lse") check_writable(path(name));
    }
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name + ".npy"; }

  /// Writes o.npy and lse.npy (and dq.npy, dk.npy, dv.npy after a backward):
  /// every file complete, or none.
  void save(const Shape& s, const Result& r, const Gradients* g) {
    try {
      const std::vector<int64_t> q_shape{s.batch, s.heads, s.seq_q, s.head_dim};
      const std::vector<int64_t> kv_shape{s.batch, s.heads, s.seq_kv, s.head_dim};
      std::vector<std::pair<std::string, std::pair<std::vector<int64_t>, const std::vector<float>*>>> files{
          {"o", {q_shape, &r.o}}, {"lse", {{s.batch, s.heads, s.seq_q}, &r.lse}}};
      if (backward_ && g) {
        files.push_back({"dq", {q_shape, &g->dq}});
        files.push_back({"dk", {kv_shape, &g->dk}});
        files.push_back({"dv", {kv_shape, &g->dv}});
      }
      std::vector<std::unique_ptr<OutputFile>> out;
      for (const auto& [name, tensor] : files) {
        out.push_back(std::make_unique<OutputFile>(path(name)));
        write_npy(*out.back(), tensor.first, *tensor.second);
      }
      for (auto& f : out) f->finish();
      for (auto& f : out) f->commit();
    } catch (...) {
      discard();
      throw;
    }
  }
  /// Removes the directory if this program created it and it is still empty.
  void discard() {
    std::error_code ec;
    if (created_ && std::filesystem::is_empty(dir_, ec)) std::filesystem::remove(dir_, ec);
  }

 private:
  static constexpr const char* kNames[] = {"o", "lse", "dq", "dk", "dv"};
  std::string dir_;
  bool backward_ = false;
  bool created_ = false;
};

/// What a GPU program's --repeat measures, said beside its figure: each launch is timed
/// alone, so the clocks are not those of sustained work (benchmarks/gpu_bench and
/// scripts/gpu/check_pytorch.py time comparisons at sustained clocks).
constexpr const char* kSingleLaunchTiming =
    "single launch, GPU idle before each: a quick look, not comparable with sustained timing";

void print_json(const StepInfo& step, const Problem& p, const RunReport& rep, Precision precision, bool deterministic) {
  const Shape& s = p.shape;
  nlohmann::ordered_json j;
  j["step"] = step.name;
  j["batch"] = s.batch;
  j["heads"] = s.heads;
  j["seq_q"] = s.seq_q;
  j["seq_kv"] = s.seq_kv;
  j["head_dim"] = s.head_dim;
  j["causal"] = p.causal;
  j["scale"] = p.scale;
  j["dtype"] = name(precision);
  j["time_ms"] = rep.time_ms;
  j["timed_runs"] = rep.timed_runs;
  j["kernel_only"] = rep.kernel_only;
  if (rep.kernel_only) j["timing"] = kSingleLaunchTiming;
  j["tflops"] = rep.tflops;
  j["nonfinite_outputs"] = rep.nonfinite;
  if (rep.verdict) {
    j["max_err_o"] = rep.verdict->errors.max_err_o;
    j["max_err_lse"] = rep.verdict->errors.max_err_lse;
    j["tol_o"] = rep.verdict->tolerance.o;
    j["tol_lse"] = rep.verdict->tolerance.lse;
    j["passed"] = rep.verdict->passed;
    if (!rep.verdict->passed) j["failure"] = rep.verdict->failure;
  } else {
    j["max_err_o"] = nullptr;
    j["max_err_lse"] = nullptr;
    j["passed"] = nullptr;
  }
  j["peak_bytes"] = rep.result.peak_bytes;
  if (rep.result.traffic) {
    j["hbm_read_bytes"] = rep.result.traffic->hbm_read_bytes;
    j["hbm_write_bytes"] = rep.result.traffic->hbm_write_bytes;
  }
  for (const auto& [name, value] : rep.result.extra) j[name] = value;  // NaN and ±inf become null
  if (rep.backward) {
    const BackwardReport& b = *rep.backward;
    nlohmann::ordered_json k;
    k["deterministic"] = deterministic;
    k["time_ms"] = b.time_ms;
    k["timed_runs"] = b.timed_runs;
    k["kernel_only"] = b.kernel_only;
    k["tflops"] = b.tflops;
    k["nonfinite_outputs"] = b.nonfinite;
    if (b.verdict) {
      k["max_err_dq"] = b.verdict->errors.dq;
      k["max_err_dk"] = b.verdict->errors.dk;
      k["max_err_dv"] = b.verdict->errors.dv;
      k["tol_dq"] = b.verdict->tolerance.dq;
      k["tol_dk"] = b.verdict->tolerance.dk;
      k["tol_dv"] = b.verdict->tolerance.dv;
      k["passed"] = b.verdict->passed;
      if (!b.verdict->passed) k["failure"] = b.verdict->failure;
    } else {
      k["passed"] = nullptr;
    }
    k["peak_bytes"] = b.gradients.peak_bytes;
    if (b.gradients.traffic) {
      k["hbm_read_bytes"] = b.gradients.traffic->hbm_read_bytes;
      k["hbm_write_bytes"] = b.gradients.traffic->hbm_write_bytes;
    }
    for (const auto& [name, value] : b.gradients.extra) k[name] = value;
    j["backward"] = k;
  }
  std::cout << j.dump() << "\n";
}

void print_table(const StepInfo& step, const Problem& p, const RunReport& rep, Precision precision,
                 bool deterministic) {
  const auto row = [](const std::string& name) -> std::ostream& {
    return std::cout << "  " << std::left << std::setw(26) << name << ' ';
  };
  std::cout << step.name << " — " << step.title << "\n";
  row("problem") << describe(p.shape) << (p.causal ? " causal" : "") << " scale=" << p.scale << " " << name(precision)
                 << "\n";
  std::ostringstream how;
  how << (rep.kernel_only ? "kernel only, CUDA events" : "wall clock") << ", median of " << rep.timed_runs
      << (rep.timed_runs == 1 ? " run" : " runs");
  if (rep.kernel_only) how << "; " << kSingleLaunchTiming;
  row("time") << std::fixed << std::setprecision(3) << rep.time_ms << " ms (" << how.str() << ")\n";
  row("TFLOP/s") << std::setprecision(4) << rep.tflops << "\n" << std::defaultfloat;
  row("peak working memory") << format_bytes(double(rep.result.peak_bytes)) << " (beyond inputs and outputs)\n";
  if (rep.result.traffic) {
    row("HBM traffic") << "read " << format_bytes(double(rep.result.traffic->hbm_read_bytes)) << ", written "
                       << format_bytes(double(rep.result.traffic->hbm_write_bytes)) << " ("
                       << rep.result.traffic->hbm_read_bytes + rep.result.traffic->hbm_write_bytes << " bytes)\n";
  }
  for (const auto& [name, value] : rep.result.extra) row(name) << std::setprecision(10) << value << "\n";
  if (rep.verdict) {
    const Verdict& v = *rep.verdict;
    std::cout << std::scientific << std::setprecision(2);
    row("max |O - O_ref|") << v.errors.max_err_o << "  (tolerance " << v.tolerance.o << ")\n";
    row("max |L - L_ref|") << v.errors.max_err_lse << "  (tolerance " << v.tolerance.lse << ")\n";
    std::cout << std::defaultfloat;
    if (v.passed) {
      row("check") << "PASS (tolerance = 2 x " << name(precision) << " standard attention's error + 1e-6)\n";
    } else {
      row("check") << "FAIL: " << v.failure << "\n";
    }
  }
  if (!rep.backward) return;
  const BackwardReport& b = *rep.backward;
  std::cout << "backward" << (deterministic ? " (deterministic)" : "") << "\n";
  std::ostringstream bhow;
  bhow << (b.kernel_only ? "kernels only, CUDA events" : "wall clock") << ", median of " << b.timed_runs
       << (b.timed_runs == 1 ? " run" : " runs");
  if (b.kernel_only) bhow << "; " << kSingleLaunchTiming;
  row("time") << std::fixed << std::setprecision(3) << b.time_ms << " ms (" << bhow.str() << ")\n";
  row("TFLOP/s") << std::setprecision(4) << b.tflops << " (2.5 x the forward's FLOPs)\n" << std::defaultfloat;
  row("peak working memory") << format_bytes(double(b.gradients.peak_bytes)) << " (beyond inputs and outputs)\n";
  if (b.gradients.traffic) {
    row("HBM traffic") << "read " << format_bytes(double(b.gradients.traffic->hbm_read_bytes)) << ", written "
                       << format_bytes(double(b.gradients.traffic->hbm_write_bytes)) << " ("
                       << b.gradients.traffic->hbm_read_bytes + b.gradients.traffic->hbm_write_bytes << " bytes)\n";
  }
  for (const auto& [name, value] : b.gradients.extra) row(name) << std::setprecision(10) << value << "\n";
  if (b.verdict) {
    const GradientVerdict& v = *b.verdict;
    std::cout << std::scientific << std::setprecision(2);
    row("max |dQ - dQ_ref|") << v.errors.dq << "  (tolerance " << v.tolerance.dq << ")\n";
    row("max |dK - dK_ref|") << v.errors.dk << "  (tolerance " << v.tolerance.dk << ")\n";
    row("max |dV - dV_ref|") << v.errors.dv << "  (tolerance " << v.tolerance.dv << ")\n";
    std::cout << std::defaultfloat;
    if (v.passed) {
      row("check") << "PASS (tolerance = 2 x " << name(precision) << " standard attention's gradient error + floor)\n";
    } else {
      row("check") << "FAIL: " << v.failure << "\n";
    }
  }
}

/// The program's whole command line, parsed and checked once.
struct ProgramArgs {
  RunConfig config;
  bool trace = false;
  std::optional<Precision> dtype;  ///< --dtype, when given
};

/// Defines the step program's options; returns false when --help was printed.
bool parse_program_args(const StepInfo& step, int argc, char** argv, ProgramArgs& args) {
  CLI::App app(step.name + " — " + step.title, step.name);
  app.footer(
      "Random inputs from --seed unless --load or --fixture.\n"
      "Exit codes: 0 ok, 1 check failed, 2 bad option or input, failed write or no GPU, 3 internal error.");
  RunConfig& c = args.config;
  cli::add_problem_options(app, c.problem);
  if (step.uses_sram_budget) {
    cli::add_int_option(app, "--sram-floats", c.settings.sram_floats, 1, int64_t{1} << 30,
                        "on-chip budget M in floats; B_c = ceil(M/4d), B_r = min(B_c, d) (default " +
                            std::to_string(step.default_sram_floats) + ")",
                        "M");
  }
  app.add_option_function<std::string>(
         "--dtype", [&args](const std::string& text) { args.dtype = parse_precision(text); },
         "the precision to compute in: fp32, bf16 or fp16 (default " + std::string(name(step.precisions.front())) +
             "; this step: " + names(step.precisions) + ")")
      ->type_name("TYPE");
  app.add_flag("--check", c.settings.check,
               "compare O and L (and dQ, dK, dV) with the fp64 reference (exit 1 on failure)");
  if (step.backward) {
    app.add_flag("--backward", c.settings.backward,
                 "run the backward pass after the forward: dQ, dK, dV from dO (DIR/do.npy with --load, "
                 "else random from --seed; all ones for a fixture)");
  }
  if (step.has_deterministic_option) {
    app.add_flag("--deterministic", c.settings.deterministic,
                 "sum dQ in a fixed order, so that repeated runs give the same bits (with --backward)")
        ->needs(app.get_option("--backward"));
  }
  cli::add_repeat_option(app, c.settings.repeat, 0,
                         "time R runs after the checked one and report the median (default 1; 0 = time the one run)");
  app.add_flag("--json", c.json, "print one JSON object instead of the table");
  cli::add_text_option(app, "--save", c.save_dir, "a directory name",
                       step.backward ? "write DIR/o.npy and DIR/lse.npy, and with --backward DIR/dq.npy, DIR/dk.npy, "
                                       "DIR/dv.npy (each complete, or not at all)"
                                     : "write DIR/o.npy and DIR/lse.npy (each complete, or not at all)",
                       "DIR");
  CLI::Option* trace = app.add_flag("--trace", args.trace, "print every step of the algorithm (tiny problems only)");
  trace->excludes(app.get_option("--json"));
  if (!cli::parse(app, argc, argv)) return false;
  if (args.trace && !step.has_trace) throw InputError(step.name + " has no --trace");
  c.settings.precision = args.dtype.value_or(step.precisions.front());
  require_precision(step, c.settings.precision);
  c.settings.progress = !c.json && isatty(STDERR_FILENO);
  return true;
}

}  // namespace

int run_program(const StepInfo& step, int argc, char** argv) {
  return guarded_main(step.name, [&]() -> int {
    ProgramArgs args;
    if (!parse_program_args(step, argc, argv, args)) return 0;  // --help
    RunConfig& config = args.config;
    const Shape& spec = config.problem.shape;
    if (config.problem.load_dir.empty() && config.problem.fixture.empty()) {
      validate(spec);
      require_head_dim(spec.head_dim, step.head_dims, step.name);
      require_host_memory(step, spec, config.settings.check, config.settings.backward);
    }
    std::optional<SaveDir> save;
    if (!config.save_dir.empty()) save.emplace(config.save_dir, config.settings.backward);  // refuse now
    try {
      const Problem problem = make_problem(config.problem, step, &config.settings.sram_floats);
      const Shape& s = problem.shape;
      require_head_dim(s.head_dim, step.head_dims, step.name);
      if (args.trace) {
        const int64_t values = s.batch_heads() * s.seq_q * s.seq_kv * s.head_dim;
        if (values > kMaxTraceValues) {
          throw InputError("--trace prints every tile: use a tiny problem (B*H*N_q*N_kv*d <= " +
                           std::to_string(kMaxTraceValues) + ", here " + std::to_string(values) + ")");
        }
        config.settings.trace = &std::cout;
      }
      const double eta = estimated_seconds(step, s, problem.causal, config.settings);
      if (eta > 10) {
        std::cerr << step.name << ": this run will take about " << format_duration(eta)
                  << (config.settings.progress ? "; progress below" : "") << " (Ctrl-C stops it)\n";
      }
      std::vector<float> d_o;
      if (config.settings.backward) d_o = make_upstream(config.problem, problem);
      const RunReport report = run_step(step, problem, config.settings, config.settings.backward ? &d_o : nullptr);
      if (report.nonfinite > 0) {
        std::cerr << step.name << ": " << (config.settings.check ? "error" : "warning") << ": "
                  << nonfinite_message(report.result) << "\n";
      }
      const BackwardReport* backward = report.backward ? &*report.backward : nullptr;
      if (backward && backward->nonfinite > 0) {
        std::cerr << step.name << ": " << (config.settings.check ? "error" : "warning") << ": " << backward->nonfinite
                  << " of " << backward->gradients.dq.size() + 2 * backward->gradients.dk.size()
                  << " gradients are not finite: these inputs overflow float32 inside the backward\n";
      }
      if (save) save->save(s, report.result, backward ? &backward->gradients : nullptr);
      const bool deterministic = config.settings.deterministic;
      if (config.json) {
        print_json(step, problem, report, config.settings.precision, deterministic);
      } else {
        print_table(step, problem, report, config.settings.precision, deterministic);
      }
      flush_stdout();
      const bool failed =
          (report.verdict && !report.verdict->passed) || (backward && backward->verdict && !backward->verdict->passed);
      return failed ? 1 : 0;
    } catch (...) {
      if (save) save->discard();
      throw;
    }
  });
}

}  // namespace common
