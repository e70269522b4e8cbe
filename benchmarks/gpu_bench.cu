/// \file gpu_bench.cu
/// \brief The GPU benchmark: every CUDA step beside a cuBLAS "standard attention", in one run.
///
/// Sections, one table, one CSV (`--csv PATH`):
///  - `grid`: B = 4, H = 16, d in {64, 128}, N in {512 … 8192}, causal off and on;
///  - `long` (with step06): cuBLAS and step06 alone at N = 16384, d in {64, 128};
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
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/cuda/cuda_check.cuh"
#include "common/cuda/device_buffer.cuh"
#include "common/cuda/device_problem.cuh"
#include "common/driver.hpp"
#include "common/fixtures.hpp"
#include "step04_cuda_smem/attention.hpp"
#include "step05_cuda_registers/attention.hpp"
#ifdef FLASH_HAVE_STEP06
#include "step06_fa2/attention.hpp"
#endif

namespace {

//! [kernels]
/// One row of the benchmark: a name, a forward pass with the steps' API, and
/// whether it takes part in the B·H sweep.
struct Entry {
  std::string name;
  common::ForwardFn forward;
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
/// Standard attention with cuBLAS (fp32 SGEMM, no TF32): S = scale·QKᵀ
/// (batched SGEMM), P = softmax(S) (one kernel), O = PV (batched SGEMM). S is
/// materialised, for a group of heads at a time so that it fits in 2 GiB.
common::Result cublas_standard_attention(const common::Problem& problem, const common::Options& options) {
  const common::Shape& s = problem.shape;
  common::cuda::require_gpu("cublas_standard");
  const int64_t n_q = s.seq_q, n_kv = s.seq_kv, d = s.head_dim;
  const int64_t heads_per_group = std::max<int64_t>(1, std::min<int64_t>(s.batch_heads(), (int64_t{2} << 30) / (4 * n_q * n_kv)));
  common::cuda::DeviceProblem dev(problem, 4 * heads_per_group * n_q * n_kv, "cublas_standard");
  common::cuda::DeviceBuffer<float> S(static_cast<size_t>(heads_per_group * n_q * n_kv));
  static cublasHandle_t handle = [] {
    cublasHandle_t h{};
    CUBLAS_CHECK(cublasCreate(&h));
    return h;
  }();
  const auto launch = [&] {
    for (int64_t h0 = 0; h0 < s.batch_heads(); h0 += heads_per_group) {
      const int g = static_cast<int>(std::min(heads_per_group, s.batch_heads() - h0));
      const float alpha = problem.scale, one = 1.0f, zero = 0.0f;
      // Row-major S (N_q, N_kv) is column-major (N_kv, N_q) = Kᵀ(col) · Q(col).
      CUBLAS_CHECK(cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(n_kv), int(n_q), int(d), &alpha,
                                             dev.k.data() + h0 * n_kv * d, int(d), n_kv * d,
                                             dev.q.data() + h0 * n_q * d, int(d), n_q * d, &zero, S.data(),
                                             int(n_kv), n_q * n_kv, g));
      softmax_rows<<<unsigned(g * n_q), 256>>>(S.data(), dev.lse.data() + h0 * n_q, int(n_q), int(n_kv),
                                              problem.causal);
      CUDA_CHECK_LAUNCH();
      // Row-major O (N_q, d) is column-major (d, N_q) = V(col) · P(col).
      CUBLAS_CHECK(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(d), int(n_q), int(n_kv), &one,
                                             dev.v.data() + h0 * n_kv * d, int(d), n_kv * d, S.data(), int(n_kv),
                                             n_q * n_kv, &zero, dev.o.data() + h0 * n_q * d, int(d), n_q * d, g));
    }
  };
  common::Result result = common::allocate_result(s);
  result.kernel_ms = common::cuda::run_and_time(options, launch);
  dev.download(result);
  return result;
}
//! [baseline]

/// The benchmark's rows. A new CUDA step with the same API is one more line.
std::vector<Entry> entries() {
  return {
      {"cublas_standard", cublas_standard_attention},
      {"step04_cuda_smem", step04::describe().forward},
      {"step05_cuda_registers", step05::describe().forward},
      {"step05_local_memory", step05::describe_local_memory().forward, false},
#ifdef FLASH_HAVE_STEP06
      {"step06_fa2", step06::describe().forward},
#endif
  };
}

/// One measured row.
struct Row {
  std::string section, kernel;
  common::Shape shape;
  bool causal = false;
  int runs = 0;
  double ms = 0, tflops = 0, speedup = 0, max_diff = 0;
};

/// Times `entry` adaptively: one timed launch first, then enough launches for
/// about half a second (at least 3, at most 50), and the median is kept.
Row measure(const Entry& entry, const common::Problem& problem, common::Result& out) {
  common::Options options;
  options.repeat = 1;
  out = entry.forward(problem, options);
  options.repeat = std::clamp(static_cast<int>(500.0 / out.kernel_ms.front()), 3, 50);
  const std::vector<double> samples = entry.forward(problem, options).kernel_ms;
  Row row;
  row.kernel = entry.name;
  row.shape = problem.shape;
  row.causal = problem.causal;
  row.runs = static_cast<int>(samples.size());
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
  const common::Problem problem = common::make_random_problem(shape, causal, 0.0f, 2026);
  common::Result baseline;
  double baseline_ms = 0;
  for (const Entry& entry : list) {
    common::Result out;
    Row row = measure(entry, problem, out);
    row.section = section;
    if (entry.name == list.front().name) {
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
  std::string csv_path;
  bool quick = false;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--csv" && a + 1 < argc) {
      csv_path = argv[++a];
    } else if (arg == "--quick") {
      quick = true;
    } else {
      std::cerr << "usage: gpu_bench [--csv PATH] [--quick]\n";
      return 2;
    }
  }
  try {
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
#ifdef FLASH_HAVE_STEP06
    // step06 (beside cuBLAS) goes on to N = 16384, where steps 4 and 5 take seconds a run.
    if (!quick) {
      for (int64_t d : {64, 128}) {
        for (bool causal : {false, true}) {
          run_problem("long", {all.front(), all.back()}, common::Shape{4, 16, 16384, 16384, d}, causal, rows);
        }
      }
    }
#endif
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
      std::ofstream csv(csv_path);
      csv << "gpu,section,kernel,batch,heads,seq_q,seq_kv,head_dim,causal,runs,median_ms,tflops,speedup_vs_cublas,"
             "max_abs_diff_vs_cublas\n";
      for (const Row& r : rows) {
        csv << prop.name << ',' << r.section << ',' << r.kernel << ',' << r.shape.batch << ',' << r.shape.heads << ','
            << r.shape.seq_q << ',' << r.shape.seq_kv << ',' << r.shape.head_dim << ',' << (r.causal ? 1 : 0) << ','
            << r.runs << ',' << r.ms << ',' << r.tflops << ',' << r.speedup << ',' << r.max_diff << '\n';
      }
      if (!csv) throw std::runtime_error("could not write " + csv_path);
      std::printf("\nCSV written to %s\n", csv_path.c_str());
    }
  } catch (const std::exception& e) {
    std::cerr << "gpu_bench: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
