/// \file cpu_backward_bench.cpp
/// \brief CPU benchmark of the backward pass: step25 (Algorithm 2, tiles) against a standard backward that keeps P.
///
/// Usage: build/bin/cpu_backward_bench [--csv FILE] [--repeat R] [--max-seq N]   (`--help`)
/// B=1, H=1, d=64, N_q = N_kv in {512, 1024, 2048, 4096, 8192}, not causal, one thread,
/// the same inputs and dO for both. The standard backward is what a framework does with
/// the P its forward stored: dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − rowsum(P ∘ dP)),
/// dQ = scale · dS K, dK = scale · dSᵀ Q, with Eigen's products on whole N × N matrices;
/// its time excludes computing P (the forward's work), and its working memory counts P
/// and dS. Step 25 recomputes S_ij and P_ij from L tile by tile. Time is the median of R
/// wall-clock runs after a warm-up; memory is measured by common::Workspace. Both
/// results are checked against the fp64 gradients up to N = 2048.
#include <unistd.h>

#include <Eigen/Dense>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>

#include "common/cli.hpp"
#include "common/driver.hpp"
#include "common/fixtures.hpp"
#include "common/output_file.hpp"
#include "common/reference_backward.hpp"
#include "common/workspace.hpp"
#include "step25_backward_cpu/attention.hpp"

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using MatrixMap = Eigen::Map<RowMatrix>;

/// Standard attention's P for one head (B = H = 1), as a forward that keeps it would store it.
void standard_p(const common::Problem& p, MatrixMap P) {
  const int64_t n_q = p.shape.seq_q, n_kv = p.shape.seq_kv, d = p.shape.head_dim;
  ConstMatrixMap Q(p.q.data(), n_q, d), K(p.k.data(), n_kv, d);
  P.noalias() = p.scale * (Q * K.transpose());
  for (int64_t i = 0; i < n_q; ++i) {
    const float m = P.row(i).maxCoeff();
    P.row(i) = (P.row(i).array() - m).exp().matrix();
    P.row(i) /= P.row(i).sum();
  }
}

/// The standard backward for one head from the stored P: two N × N matrices live (P and dS).
common::Gradients standard_backward(const common::Problem& p, const MatrixMap& P, const std::vector<float>& d_o) {
  const int64_t n_q = p.shape.seq_q, n_kv = p.shape.seq_kv, d = p.shape.head_dim;
  ConstMatrixMap Q(p.q.data(), n_q, d), K(p.k.data(), n_kv, d), V(p.v.data(), n_kv, d), dO(d_o.data(), n_q, d);
  common::Gradients g = common::allocate_gradients(p.shape);
  MatrixMap dQ(g.dq.data(), n_q, d), dK(g.dk.data(), n_kv, d), dV(g.dv.data(), n_kv, d);
  common::Workspace<float> ds_storage(static_cast<size_t>(n_q * n_kv));
  MatrixMap dS(ds_storage.data(), n_q, n_kv);
  dV.noalias() = P.transpose() * dO;
  dS.noalias() = dO * V.transpose();  // dP, then dS in place
  const Eigen::VectorXf D = P.cwiseProduct(dS).rowwise().sum();
  dS = P.cwiseProduct((dS.array().colwise() - D.array()).matrix());
  dQ.noalias() = p.scale * (dS * K);
  dK.noalias() = p.scale * (dS.transpose() * Q);
  return g;
}

}  // namespace

/// Runs the benchmark; see the file comment for the options.
int main(int argc, char** argv) {
  return common::guarded_main("cpu_backward_bench", [&]() -> int {
    std::string csv_path = "cpu_backward_bench.csv";
    int repeat = 3;
    int64_t max_seq = 8192;
    CLI::App app("CPU benchmark of the backward: step25 (Algorithm 2) against a standard backward that keeps P.",
                 "cpu_backward_bench");
    common::cli::add_csv_option(app, csv_path, "write the table as CSV to FILE (default cpu_backward_bench.csv)");
    common::cli::add_repeat_option(app, repeat, 1, "timed runs per entry after a warm-up (1 … 100000, default 3)");
    common::cli::add_int_option(app, "--max-seq", max_seq, 512, 8192,
                                "longest N of 512, 1024, 2048, 4096, 8192 to run (512 … 8192, default 8192)", "N");
    app.footer("Exit codes: 0 ok, 1 a result failed its check, 2 bad option or a failed write.");
    if (!common::cli::parse(app, argc, argv)) return 0;  // --help
    common::check_writable(csv_path);
    const common::StepInfo step = step25::describe();

    std::ostringstream csv;
    csv << "method,batch,heads,seq,head_dim,causal,time_ms,tflops,peak_bytes,runs\n";
    std::cout << "CPU backward: B=1 H=1 d=64, not causal, fp32, one thread; median of " << repeat
              << " runs after a warm-up\n\n"
              << std::setw(6) << "N" << std::setw(15) << "standard ms" << std::setw(13) << "step25 ms" << std::setw(9)
              << "24/std" << std::setw(15) << "standard mem" << std::setw(13) << "step25 mem" << std::setw(9)
              << "24/std"
              << "\n";
    int failed = 0;
    for (int64_t n : {512, 1024, 2048, 4096, 8192}) {
      if (n > max_seq) break;
      const common::Shape shape{1, 1, n, n, 64};
      const common::Problem p = common::make_random_problem(shape, false, std::nullopt, 42);
      const std::vector<float> d_o = common::make_random_upstream(shape, 43);
      const common::Result forward = step.forward(p, {});
      const common::BackwardInputs in{forward.o, forward.lse, d_o};

      // The standard backward: P stored (outside the timing), then the backward from it.
      common::WorkspaceCounter::reset_peak();
      const int64_t live_before = common::WorkspaceCounter::live();
      common::Workspace<float> p_storage(static_cast<size_t>(n * n));
      MatrixMap P(p_storage.data(), n, n);
      standard_p(p, P);
      common::Gradients standard = standard_backward(p, P, d_o);
      const int64_t standard_bytes = common::WorkspaceCounter::peak() - live_before;
      std::vector<double> samples;
      for (int r = 0; r < repeat; ++r) {
        const auto start = std::chrono::steady_clock::now();
        standard = standard_backward(p, P, d_o);
        samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      }
      const double standard_ms = common::median(samples);

      common::WorkspaceCounter::reset_peak();
      const int64_t live_tiled = common::WorkspaceCounter::live();
      common::Gradients tiled = step25::attention_backward(p, in);
      const int64_t tiled_bytes = common::WorkspaceCounter::peak() - live_tiled;
      samples.clear();
      for (int r = 0; r < repeat; ++r) {
        const auto start = std::chrono::steady_clock::now();
        tiled = step25::attention_backward(p, in);
        samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      }
      const double tiled_ms = common::median(samples);
      // The fp64 check costs several backwards in plain loops: up to N = 2048.
      for (const auto* g : {&standard, &tiled}) {
        if (n > 2048) break;
        const common::GradientVerdict v = common::check_gradients(p, d_o, *g);
        if (!v.passed) {
          std::cerr << "cpu_backward_bench: N = " << n << ": " << (g == &standard ? "standard" : "step25") << ": "
                    << v.failure << "\n";
          ++failed;
        }
      }
      const double flops = common::attention_backward_flops(shape, false);
      csv << "standard_keeps_p,1,1," << n << ",64,0," << standard_ms << "," << flops / (standard_ms * 1e9) << ","
          << standard_bytes << "," << repeat << "\n";
      csv << "step25_backward_cpu,1,1," << n << ",64,0," << tiled_ms << "," << flops / (tiled_ms * 1e9) << ","
          << tiled_bytes << "," << repeat << "\n";
      std::cout << std::fixed << std::setw(6) << n << std::setprecision(1) << std::setw(15) << standard_ms
                << std::setw(13) << tiled_ms << std::setprecision(2) << std::setw(9) << tiled_ms / standard_ms
                << std::setw(15) << common::format_bytes(double(standard_bytes)) << std::setw(13)
                << common::format_bytes(double(tiled_bytes)) << std::setprecision(3) << std::setw(9)
                << double(tiled_bytes) / double(standard_bytes) << "\n"
                << std::flush;
    }
    common::write_file(csv_path, csv.str());
    std::cout << "\nCSV written to " << csv_path << "\n";
    common::flush_stdout();
    return failed > 0 ? 1 : 0;
  });
}
