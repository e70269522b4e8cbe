/// \file gpu_bench.cu
/// \brief The GPU benchmark: every CUDA step beside a cuBLAS "standard attention", in one run.
///
/// Sections, one table, one CSV (`--csv PATH`):
///  - `grid`: B = 4, H = 16, d in {64, 128}, N in {512 … 8192}, causal off and on;
///  - `long`: cuBLAS and the last GPU step alone at N = 16384, d in {64, 128};
///  - `sweep`: N = 4096, d = 128, B·H from 1 to 256 — FlashAttention-1 runs one
///    block per (batch, head), so it cannot fill a GPU with fewer heads than SMs.
/// Each entry reports the median kernel time (CUDA events, after a warm-up),
/// TFLOP/s (4·B·H·N_q·N_kv·d, halved when causal), the speed-up over cuBLAS and
/// the largest |O − O_cuBLAS| as a sanity check (correctness is the tests' job).
///
/// Run: build/bin/gpu_bench --csv gpu_bench.csv        (about a minute on an H100)
///      build/bin/gpu_bench --quick                    (N <= 1024, a smoke test)
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/cuda/cuda_check.cuh"
#include "common/cuda/gpu_step.cuh"
#include "common/driver.hpp"
#include "common/fixtures.hpp"
#include "common/output_file.hpp"
#include "gpu_steps.hpp"

namespace {

//! [kernels]
/// One row of the benchmark: a step (or the cuBLAS baseline, described as one), and
/// whether it takes part in the B·H sweep.
struct Entry {
  common::StepInfo step;
  bool in_sweep = true;
};
//! [kernels]

void check_cublas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLAS error ") + std::to_string(int(status)) + " in " + call);
  }
}
#define CUBLAS_CHECK(call) check_cublas((call), #call)

/// One block per row of S: P = softmax(S) in place (hidden causal entries become
/// 0) and L = max + log(sum) of the row. S: (rows, N_kv); row r is query r % N_q.
__global__ void softmax_rows(float* S, float* L, int n_q, int n_kv, bool causal) {
  __shared__ float partial[32];
  const size_t row = blockIdx.x;
  const int query = static_cast<int>(row % n_q);
  float* s = S + row * n_kv;
  const int visible = causal ? min(n_kv, query + 1) : n_kv;
  const auto block_reduce = [&](float x, bool is_max) {
    for (int o = 16; o > 0; o /= 2) {
      const float y = __shfl_xor_sync(0xffffffffu, x, o);
      x = is_max ? fmaxf(x, y) : x + y;
    }
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = x;
    __syncthreads();
    x = is_max ? -INFINITY : 0.0f;
    for (int w = 0; w < int(blockDim.x / 32); ++w) x = is_max ? fmaxf(x, partial[w]) : x + partial[w];
    __syncthreads();  // partial is reused by the next reduction
    return x;
  };
  float mx = -INFINITY;
  for (int c = threadIdx.x; c < visible; c += blockDim.x) mx = fmaxf(mx, s[c]);
  mx = block_reduce(mx, true);
  float sum = 0.0f;
  for (int c = threadIdx.x; c < visible; c += blockDim.x) sum += expf(s[c] - mx);
  sum = block_reduce(sum, false);
  for (int c = threadIdx.x; c < n_kv; c += blockDim.x) s[c] = c < visible ? expf(s[c] - mx) / sum : 0.0f;
  if (threadIdx.x == 0) L[row] = mx + logf(sum);
}

//! [baseline]
/// How many (batch, head) pairs the baseline computes at once: S of a group
/// must fit in 2 GiB.
int64_t heads_per_group(const common::Shape& s) {
  return std::max<int64_t>(1, std::min<int64_t>(s.batch_heads(), (int64_t{2} << 30) / (4 * s.seq_q * s.seq_kv)));
}

/// Standard attention with cuBLAS (fp32 SGEMM, no TF32): S = scale·QKᵀ
/// (batched SGEMM), P = softmax(S) (one kernel), O = PV (batched SGEMM). S is
/// materialised in the workspace, for a group of heads at a time.
void cublas_standard_attention(const common::DeviceArgs& a) {
  const common::Shape& s = a.shape;
  const int64_t n_q = s.seq_q, n_kv = s.seq_kv, d = s.head_dim, group = heads_per_group(s);
  float* S = static_cast<float*>(a.workspace);
  static cublasHandle_t handle = [] {
    cublasHandle_t h{};
    CUBLAS_CHECK(cublasCreate(&h));
    return h;
  }();
  CUBLAS_CHECK(cublasSetStream(handle, common::cuda::stream_of(a)));
  const float* q = a.q_as<float>();
  const float* k = a.k_as<float>();
  const float* v = a.v_as<float>();
  float* o = a.o_as<float>();
  for (int64_t h0 = 0; h0 < s.batch_heads(); h0 += group) {
    const int g = static_cast<int>(std::min(group, s.batch_heads() - h0));
    const float alpha = a.scale, one = 1.0f, zero = 0.0f;
    // Row-major S (N_q, N_kv) is column-major (N_kv, N_q) = Kᵀ(col) · Q(col).
    CUBLAS_CHECK(cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(n_kv), int(n_q), int(d), &alpha,
                                           k + h0 * n_kv * d, int(d), n_kv * d, q + h0 * n_q * d, int(d), n_q * d,
                                           &zero, S, int(n_kv), n_q * n_kv, g));
    softmax_rows<<<unsigned(g * n_q), 256, 0, common::cuda::stream_of(a)>>>(S, a.lse + h0 * n_q, int(n_q), int(n_kv),
                                                                            a.causal);
    CUDA_CHECK_LAUNCH();
    // Row-major O (N_q, d) is column-major (d, N_q) = V(col) · P(col).
    CUBLAS_CHECK(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(d), int(n_q), int(n_kv), &one,
                                           v + h0 * n_kv * d, int(d), n_kv * d, S, int(n_kv), n_q * n_kv, &zero,
                                           o + h0 * n_q * d, int(d), n_q * d, g));
  }
}

/// The baseline as a step, so that it is uploaded, run and timed like the steps.
common::StepInfo cublas_step() {
  common::GpuKernel kernel;
  kernel.launch = cublas_standard_attention;
  kernel.workspace_bytes = [](const common::Shape& s) { return 4 * heads_per_group(s) * s.seq_q * s.seq_kv; };
  return common::cuda::gpu_step("cublas_standard", "standard attention with cuBLAS SGEMM and a softmax kernel", {},
                                kernel);
}
//! [baseline]

/// The benchmark's rows: the baseline, every fp32 GPU step built in this tree, and
/// step 5's spilling build (not in the B·H sweep).
std::vector<Entry> entries() {
  std::vector<Entry> list = {{cublas_step()}};
  for (const common::StepInfo& step : tour::built_gpu_steps()) {
    // The baseline is fp32: the bf16/fp16 steps are compared with PyTorch's SDPA in
    // their own precision instead (scripts/check_pytorch.py --dtype).
    if (step.precisions.front() != common::Precision::fp32) continue;
    list.push_back({step});
    if (step.name == "step05_cuda_registers") list.push_back({step05_spill::describe(), false});
  }
  return list;
}

/// One measured row.
struct Row {
  std::string section, kernel;
  common::Shape shape;
  bool causal = false;
  int runs = 0;
  double ms = 0, tflops = 0, speedup = 0, max_diff = 0;
};

/// Times `entry` adaptively in one session (one upload): one checked run, one
/// timed run, then enough timed runs for about half a second (at least 3, at
/// most 50); the median is kept.
Row measure(const Entry& entry, const common::Problem& problem, common::Result& out) {
  const std::unique_ptr<common::Session> session = common::open_session(entry.step, problem, {});
  session->run();
  out = session->result();
  const double first_ms = session->timed_run_ms();
  const int runs = std::clamp(static_cast<int>(500.0 / first_ms), 3, 50);
  std::vector<double> samples;
  for (int r = 0; r < runs; ++r) samples.push_back(session->timed_run_ms());
  Row row;
  row.kernel = entry.step.name;
  row.shape = problem.shape;
  row.causal = problem.causal;
  row.runs = runs;
  row.ms = common::median(samples);
  row.tflops = common::attention_flops(problem.shape, problem.causal) / (row.ms * 1e-3) / 1e12;
  return row;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t e = 0; e < a.size(); ++e) m = std::max(m, double(std::abs(a[e] - b[e])));
  return m;
}

/// Runs every entry on one problem; the first entry (cuBLAS) is the baseline.
void run_problem(const std::string& section, const std::vector<Entry>& list, const common::Shape& shape, bool causal,
                 std::vector<Row>& rows) {
  const common::Problem problem = common::make_random_problem(shape, causal, std::nullopt, 2026);
  common::Result baseline;
  double baseline_ms = 0;
  for (const Entry& entry : list) {
    common::Result out;
    Row row = measure(entry, problem, out);
    row.section = section;
    if (entry.step.name == list.front().step.name) {
      baseline = std::move(out);
      baseline_ms = row.ms;
    } else {
      row.max_diff = max_abs_diff(out.o, baseline.o);
    }
    row.speedup = baseline_ms / row.ms;
    std::fprintf(stderr, "  %-8s %-22s B=%-3lld H=%-3lld N=%-5lld d=%-3lld %-6s %9.3f ms %6.2f TFLOP/s\n",
                 section.c_str(), row.kernel.c_str(), (long long)shape.batch, (long long)shape.heads,
                 (long long)shape.seq_q, (long long)shape.head_dim, causal ? "causal" : "", row.ms, row.tflops);
    rows.push_back(row);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return common::guarded_main("gpu_bench", [&]() -> int {
    std::string csv_path;
    bool quick = false;
    CLI::App app("The GPU benchmark: every CUDA step beside a cuBLAS standard attention, in one run.", "gpu_bench");
    common::cli::add_csv_option(app, csv_path, "write every row as CSV to FILE (whole, or not at all)");
    app.add_flag("--quick", quick, "N <= 1024 only: a smoke test");
    app.footer("Exit codes: 0 ok, 2 bad option, no GPU, or a failed write, 3 a CUDA error.");
    if (!common::cli::parse(app, argc, argv)) return 0;  // --help
    if (!csv_path.empty()) common::check_writable(csv_path);
    common::cuda::require_gpu("gpu_bench");
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("GPU: %s, %d SMs\n", prop.name, prop.multiProcessorCount);

    const std::vector<Entry> all = entries();
    std::vector<Entry> sweep_list;
    for (const Entry& e : all) {
      if (e.in_sweep) sweep_list.push_back(e);
    }
    const std::vector<int64_t> lengths = quick ? std::vector<int64_t>{512, 1024}
                                               : std::vector<int64_t>{512, 1024, 2048, 4096, 8192};
    std::vector<Row> rows;
    for (int64_t d : {64, 128}) {
      for (int64_t n : lengths) {
        for (bool causal : {false, true}) run_problem("grid", all, common::Shape{4, 16, n, n, d}, causal, rows);
      }
    }
    // The last (fastest) step, beside cuBLAS, goes on to N = 16384, where the
    // first GPU steps take seconds a run.
    if (!quick) {
      for (int64_t d : {64, 128}) {
        for (bool causal : {false, true}) {
          run_problem("long", {all.front(), all.back()}, common::Shape{4, 16, 16384, 16384, d}, causal, rows);
        }
      }
    }
    const int64_t sweep_n = quick ? 1024 : 4096;
    for (int64_t bh : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
      run_problem("sweep", sweep_list, common::Shape{1, bh, sweep_n, sweep_n, 128}, false, rows);
    }

    std::printf("\n%-6s %-22s %5s %5s %3s %-6s %5s %10s %8s %9s %10s\n", "", "kernel", "B·H", "N", "d", "mask",
                "runs", "median ms", "TFLOP/s", "vs cuBLAS", "max|ΔO|");
    for (const Row& r : rows) {
      std::printf("%-6s %-22s %5lld %5lld %3lld %-6s %5d %10.3f %8.2f %8.2fx %10.2e\n", r.section.c_str(),
                  r.kernel.c_str(), (long long)r.shape.batch_heads(), (long long)r.shape.seq_q,
                  (long long)r.shape.head_dim, r.causal ? "causal" : "none", r.runs, r.ms, r.tflops, r.speedup,
                  r.max_diff);
    }
    if (!csv_path.empty()) {
      std::ostringstream csv;
      csv << "gpu,section,kernel,batch,heads,seq_q,seq_kv,head_dim,causal,runs,median_ms,tflops,speedup_vs_cublas,"
             "max_abs_diff_vs_cublas\n";
      for (const Row& r : rows) {
        csv << prop.name << ',' << r.section << ',' << r.kernel << ',' << r.shape.batch << ',' << r.shape.heads << ','
            << r.shape.seq_q << ',' << r.shape.seq_kv << ',' << r.shape.head_dim << ',' << (r.causal ? 1 : 0) << ','
            << r.runs << ',' << r.ms << ',' << r.tflops << ',' << r.speedup << ',' << r.max_diff << '\n';
      }
      common::write_file(csv_path, csv.str());
      std::printf("\nCSV written to %s\n", csv_path.c_str());
    }
    common::flush_stdout();
    return 0;
  });
}
