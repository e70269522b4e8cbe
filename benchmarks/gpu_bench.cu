/// \file gpu_bench.cu
/// \brief The GPU benchmark: every CUDA step beside a cuBLAS "standard attention", in one run.
///
/// Sections, one table, one CSV (`--csv PATH`); `--sections` picks them:
///  - `grid`: B = 4, H = 16, d in {64, 128}, N in {512 … 8192}, causal off and on;
///  - `long`: cuBLAS and the last fp32 GPU step alone at N = 16384, d in {64, 128};
///  - `sweep`: N = 4096, d = 128, B·H from 1 to 256 — FlashAttention-1 runs one
///    block per (batch, head), so it cannot fill a GPU with fewer heads than SMs;
///  - `steps` (not in the default set): every GPU step, fp32 and 16-bit alike, each in
///    its own precision (`--half-dtype` for the 16-bit ones), beside cuBLAS at B = 4,
///    H = 16, N = `--seq` (4096), d in {64, 128}, causal off and on: the figures the step
///    pages' "measured" tables show (scripts/gpu/round.sh, perf phase);
///  - `backward` (not in the default set): every GPU step with a backward pass, its
///    forward (its parent's kernel) and its backward timed alike, the backward with dQ by
///    atomics and in the deterministic mode, at B = 4, H = 16, N in {1024, 4096}, d in
///    {64, 128}, causal off and on. Backward TFLOP/s count 2.5 × the forward's FLOPs.
/// The grid, long and sweep sections time the fp32 steps; the 16-bit steps are compared
/// with PyTorch's SDPA in their own precision (scripts/gpu/check_pytorch.py).
///
/// Every kernel, the baseline included, is timed the same two ways, at sustained clocks
/// (see SustainedTimer): `back_to_back`, K calls on one stream between two CUDA events
/// after about 0.75 s of warm-up calls, and `cuda_graph`, the same K calls captured once
/// into a CUDA graph and replayed; each is the median over 5 repetitions of the time per
/// call. The programs' `--repeat` (one launch at a time, the GPU idle before each) is a
/// quick look and is never set beside these figures. Each row reports TFLOP/s
/// (4·B·H·N_q·N_kv·d, halved when causal), the speed-up over cuBLAS timed by the same
/// method, and the largest |O − O_cuBLAS| as a sanity check (correctness is the tests' job;
/// a 16-bit step differs from fp32 cuBLAS by its rounding, about 1e-2).
///
/// Run: build/bin/gpu_bench --csv gpu_bench.csv        (a few minutes on an H100)
///      build/bin/gpu_bench --quick                    (N <= 1024, a smoke test)
///      build/bin/gpu_bench --sections steps --steps 4,9,17 --csv steps.csv
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/cuda/cuda_check.cuh"
#include "common/cuda/device_buffer.cuh"
#include "common/cuda/device_problem.cuh"
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
  kernel.workspace_bytes = [](const common::Shape& s, bool) { return 4 * heads_per_group(s) * s.seq_q * s.seq_kv; };
  return common::cuda::gpu_step("cublas_standard", "standard attention with cuBLAS SGEMM and a softmax kernel", {},
                                kernel);
}
//! [baseline]

/// The benchmark's rows: the baseline, then the GPU steps built in this tree that
/// `keep` accepts, in ladder order. `with_half`: the bf16/fp16 steps too (the `steps`
/// section); else the fp32 steps and step 5's spilling build (not in the B·H sweep).
std::vector<Entry> entries(bool with_half, const std::function<bool(const std::string&)>& keep) {
  std::vector<Entry> list = {{cublas_step()}};
  for (const common::StepInfo& step : tour::built_gpu_steps()) {
    if (!keep(step.name)) continue;
    if (!step.extends.empty()) continue;  // a backward step's forward is its parent's kernel: timed there
    // The baseline is fp32: outside the `steps` section the bf16/fp16 steps are compared
    // with PyTorch's SDPA in their own precision instead (scripts/gpu/check_pytorch.py --dtype).
    if (!with_half && step.precisions.front() != common::Precision::fp32) continue;
    list.push_back({step});
    if (!with_half && step.name == "step05_cuda_registers") list.push_back({step05_spill::describe(), false});
  }
  return list;
}

//! [sustained]
/// The two ways every kernel of this benchmark is timed, the baseline included.
enum class Method { back_to_back, cuda_graph };
constexpr Method kMethods[] = {Method::back_to_back, Method::cuda_graph};
const char* method_name(Method m) { return m == Method::back_to_back ? "back_to_back" : "cuda_graph"; }

constexpr double kWarmupMs = 750;  // calls before timing: the GPU reaches the clocks it holds under load
constexpr double kRepetitionMs = 50;  // one repetition's length: event resolution and host gaps do not count
constexpr int kMinCalls = 2;  // calls per repetition, at least: back to back even for a slow kernel
constexpr int kMaxCalls = 1000;
constexpr int kRepetitions = 5;  // the median is over this many repetitions

/// The time per call of one kernel, by each Method, and how it was measured.
struct Sustained {
  int calls = 0;  // K: calls per repetition (and per graph)
  double ms[std::size(kMethods)] = {};  // median over kRepetitions of (elapsed / K), per Method
};

/// Times a kernel at sustained clocks, on a stream of its own:
///  - back_to_back: ~kWarmupMs of warm-up calls, then K calls enqueued back to back
///    between two CUDA events; the time per call is elapsed / K;
///  - cuda_graph: the same K calls captured once into a CUDA graph, which is
///    replayed (once untimed, then timed between two events); per call = elapsed / K.
/// Each figure is the median of kRepetitions repetitions. The inputs stay where
/// they are between calls: nothing is uploaded or allocated while timing.
class SustainedTimer {
 public:
  SustainedTimer() {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&start_));
    CUDA_CHECK(cudaEventCreate(&stop_));
  }
  SustainedTimer(const SustainedTimer&) = delete;
  SustainedTimer& operator=(const SustainedTimer&) = delete;
  ~SustainedTimer() {  // errors ignored: a destructor must not throw
    (void)cudaEventDestroy(start_);
    (void)cudaEventDestroy(stop_);
    (void)cudaStreamDestroy(stream_);
  }

  /// The stream every call must be enqueued on.
  cudaStream_t stream() const { return stream_; }

  /// Both figures for `launch`, which enqueues one call on stream() (and checks it).
  Sustained time(const std::string& kernel, const std::function<void()>& launch) {
    const auto calls_for = [](double ms_per_call, double total_ms) {
      return std::clamp(static_cast<int>(std::ceil(total_ms / std::max(ms_per_call, 1e-4))), kMinCalls, kMaxCalls);
    };
    const double first_ms = elapsed_ms([&] { launch(); });  // sizes the warm-up only: the GPU may be cold
    const int warmup = std::max(calls_for(first_ms, kWarmupMs), 1);
    const double warm_ms = elapsed_ms([&] {
                             for (int c = 0; c < warmup; ++c) launch();
                           }) /
                           warmup;
    Sustained out;
    out.calls = calls_for(warm_ms, kRepetitionMs);
    std::vector<double> samples;
    for (int r = 0; r < kRepetitions; ++r) {
      samples.push_back(elapsed_ms([&] {
                          for (int c = 0; c < out.calls; ++c) launch();
                        }) /
                        out.calls);
    }
    out.ms[0] = common::median(samples);

    const GraphExec graph(capture(kernel, out.calls, launch));
    CUDA_CHECK(cudaGraphUpload(graph.exec, stream_));
    (void)elapsed_ms([&] { CUDA_CHECK(cudaGraphLaunch(graph.exec, stream_)); });  // the first replay: untimed
    samples.clear();
    for (int r = 0; r < kRepetitions; ++r) {
      samples.push_back(elapsed_ms([&] { CUDA_CHECK(cudaGraphLaunch(graph.exec, stream_)); }) / out.calls);
    }
    out.ms[1] = common::median(samples);
    return out;
  }

 private:
  /// An instantiated graph that frees itself.
  struct GraphExec {
    explicit GraphExec(cudaGraph_t graph) {
      const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
      (void)cudaGraphDestroy(graph);  // the executable graph keeps what it needs
      CUDA_CHECK(status);
    }
    GraphExec(const GraphExec&) = delete;
    GraphExec& operator=(const GraphExec&) = delete;
    ~GraphExec() { (void)cudaGraphExecDestroy(exec); }
    cudaGraphExec_t exec{};
  };

  /// `calls` calls of `launch` captured into a graph. A launch that cannot be captured
  /// (it synchronises, allocates or copies through the host) fails here, loudly: the
  /// capture is ended and the error names the kernel, never replaced by another timing.
  cudaGraph_t capture(const std::string& kernel, int calls, const std::function<void()>& launch) {
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      for (int c = 0; c < calls; ++c) launch();
    } catch (const std::exception& e) {
      cudaGraph_t broken = nullptr;
      (void)cudaStreamEndCapture(stream_, &broken);
      if (broken) (void)cudaGraphDestroy(broken);
      (void)cudaGetLastError();
      throw common::cuda::CudaError(kernel + " cannot be captured into a CUDA graph: " + e.what());
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t status = cudaStreamEndCapture(stream_, &graph);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      throw common::cuda::CudaError(kernel + " cannot be captured into a CUDA graph: cudaStreamEndCapture says " +
                                    cudaGetErrorString(status));
    }
    return graph;
  }

  /// Milliseconds between two events recorded on stream() around what `enqueue` enqueues.
  template <class F>
  double elapsed_ms(F&& enqueue) {
    CUDA_CHECK(cudaEventRecord(start_, stream_));
    enqueue();
    CUDA_CHECK(cudaEventRecord(stop_, stream_));
    CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

  cudaStream_t stream_{};
  cudaEvent_t start_{}, stop_{};
};
//! [sustained]

/// One measured row: one kernel, one problem, one Method.
struct Row {
  std::string section, kernel, method;
  common::Precision precision = common::Precision::fp32;
  common::Shape shape;
  bool causal = false;
  int calls = 0;
  double ms = 0, tflops = 0, speedup = 0, max_diff = 0;
  common::Figures resources;
};

/// Validates, then times `entry` in `precision`: Q, K, V uploaded once, one checked
/// launch (O downloaded into `out`), then both Methods. One Row per Method.
std::vector<Row> measure(const Entry& entry, const common::Problem& problem, common::Precision precision,
                         common::Result& out) {
  const common::GpuKernel& kernel = *entry.step.gpu;
  const common::Shape& shape = problem.shape;
  const int64_t workspace_bytes = kernel.workspace_bytes ? kernel.workspace_bytes(shape, problem.causal) : 0;
  common::cuda::DeviceProblem dev(problem, workspace_bytes, entry.step.name, precision);
  common::cuda::DeviceBuffer<char> workspace(size_t(std::max<int64_t>(workspace_bytes, 0)));
  SustainedTimer timer;
  CUDA_CHECK(cudaDeviceSynchronize());  // the uploads and the poisoning ran on the default stream
  common::DeviceArgs args;
  args.shape = shape;
  args.causal = problem.causal;
  args.scale = problem.scale;
  args.precision = precision;
  args.q = dev.q.data();
  args.k = dev.k.data();
  args.v = dev.v.data();
  args.o = dev.o.data();
  args.lse = dev.lse.data();
  args.workspace = workspace_bytes > 0 ? workspace.data() : nullptr;
  args.stream = timer.stream();

  kernel.launch(args);  // validate, then time
  CUDA_CHECK(cudaStreamSynchronize(timer.stream()));
  out = common::allocate_result(shape);
  dev.download(out);
  const Sustained t = timer.time(entry.step.name, [&] { kernel.launch(args); });

  std::vector<Row> rows;
  for (size_t m = 0; m < std::size(kMethods); ++m) {
    Row row;
    row.kernel = entry.step.name;
    row.method = method_name(kMethods[m]);
    row.precision = precision;
    row.shape = shape;
    row.causal = problem.causal;
    row.calls = t.calls;
    row.ms = t.ms[m];
    row.tflops = common::attention_flops(shape, problem.causal) / (row.ms * 1e-3) / 1e12;
    if (kernel.resources) row.resources = kernel.resources(shape.head_dim);
    rows.push_back(row);
  }
  return rows;
}

/// Times a backward step at one problem: its forward, then its backward in both modes
/// (dQ by atomics, deterministic where the step offers it), each by both Methods, on the forward's O and L and a
/// random dO. Rows named "<step>:forward", ":backward", ":backward_deterministic".
std::vector<Row> measure_backward(const common::StepInfo& step, const common::Problem& problem) {
  const common::GpuKernel& kernel = *step.gpu;
  const common::Shape& s = problem.shape;
  const common::Precision precision = step.precisions.front();
  const int64_t forward_workspace = kernel.workspace_bytes ? kernel.workspace_bytes(s, problem.causal) : 0;
  common::cuda::DeviceProblem dev(problem, forward_workspace, step.name, precision);
  common::cuda::DeviceBuffer<char> workspace(size_t(std::max<int64_t>(forward_workspace, 0)));
  SustainedTimer timer;
  CUDA_CHECK(cudaDeviceSynchronize());
  common::DeviceArgs args;
  args.shape = s;
  args.causal = problem.causal;
  args.scale = problem.scale;
  args.precision = precision;
  args.q = dev.q.data();
  args.k = dev.k.data();
  args.v = dev.v.data();
  args.o = dev.o.data();
  args.lse = dev.lse.data();
  args.workspace = forward_workspace > 0 ? workspace.data() : nullptr;
  args.stream = timer.stream();
  kernel.launch(args);  // O and L for the backward
  CUDA_CHECK(cudaStreamSynchronize(timer.stream()));

  const int64_t e = int64_t(common::cuda::element_bytes(precision));
  const auto d_o = common::cuda::upload_as(common::make_random_upstream(s, 2027), precision);
  common::cuda::DeviceBuffer<unsigned char> dq(size_t(s.q_elements() * e)), dk(size_t(s.kv_elements() * e)),
      dv(size_t(s.kv_elements() * e));
  // One workspace for both modes: the larger of the two (the deterministic one may need more, or less).
  common::cuda::DeviceBuffer<char> backward_workspace(
      size_t(std::max(kernel.backward_workspace_bytes(s, false), kernel.backward_workspace_bytes(s, true))));
  common::DeviceBackwardArgs b;
  b.shape = s;
  b.causal = problem.causal;
  b.scale = problem.scale;
  b.precision = precision;
  b.q = args.q;
  b.k = args.k;
  b.v = args.v;
  b.o = args.o;
  b.lse = args.lse;
  b.d_o = d_o.data();
  b.dq = dq.data();
  b.dk = dk.data();
  b.dv = dv.data();
  b.workspace = backward_workspace.data();
  b.stream = timer.stream();

  std::vector<Row> rows;
  const auto add = [&](const std::string& what, const Sustained& t, double flops) {
    for (size_t m = 0; m < std::size(kMethods); ++m) {
      Row row;
      row.kernel = step.name + ":" + what;
      row.method = method_name(kMethods[m]);
      row.precision = precision;
      row.shape = s;
      row.causal = problem.causal;
      row.calls = t.calls;
      row.ms = t.ms[m];
      row.tflops = flops / (row.ms * 1e-3) / 1e12;
      rows.push_back(row);
    }
  };
  add("forward", timer.time(step.name, [&] { kernel.launch(args); }), common::attention_flops(s, problem.causal));
  const double backward_flops = common::attention_backward_flops(s, problem.causal);
  for (bool deterministic : {false, true}) {
    if (deterministic && !kernel.deterministic_dq) continue;  // dQ by atomics only (steps 26 to 28, 30, 31)
    b.deterministic = deterministic;
    kernel.launch_backward(b);  // launches once outside the timing: a failure is reported here
    CUDA_CHECK(cudaStreamSynchronize(timer.stream()));
    add(deterministic ? "backward_deterministic" : "backward",
        timer.time(step.name, [&] { kernel.launch_backward(b); }), backward_flops);
  }
  return rows;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t e = 0; e < a.size(); ++e) {
    const double diff = std::abs(double(a[e]) - double(b[e]));
    if (!(diff <= m)) m = diff;  // NaN wins: an unwritten (poisoned) element must show
  }
  return m;
}

/// The precision `step` is timed in: its own, or `half` for a 16-bit step that computes in it.
common::Precision precision_for(const common::StepInfo& step, common::Precision half) {
  const common::Precision own = step.precisions.front();
  if (own == common::Precision::fp32) return own;
  return std::find(step.precisions.begin(), step.precisions.end(), half) != step.precisions.end() ? half : own;
}

/// Runs every entry on one problem; the first entry (cuBLAS) is the baseline, and each
/// row's speed-up is over the baseline timed by the same Method. Returns how many
/// kernels gave a non-finite O (each is said on stderr).
int run_problem(const std::string& section, const std::vector<Entry>& list, const common::Shape& shape, bool causal,
                common::Precision half, std::vector<Row>& rows) {
  const common::Problem problem = common::make_random_problem(shape, causal, std::nullopt, 2026);
  common::Result baseline;
  std::vector<double> baseline_ms;
  int nonfinite = 0;
  for (const Entry& entry : list) {
    common::Result out;
    std::vector<Row> measured = measure(entry, problem, precision_for(entry.step, half), out);
    const bool is_baseline = entry.step.name == list.front().step.name;
    const double diff = is_baseline ? 0.0 : max_abs_diff(out.o, baseline.o);
    if (!std::isfinite(diff)) {
      std::fprintf(stderr,
                   "gpu_bench: %s gave a non-finite O (max|O - O_cuBLAS| = %g) at %s: its figures are not "
                   "a valid measurement\n",
                   entry.step.name.c_str(), diff, common::describe(shape).c_str());
      ++nonfinite;
    }
    for (size_t m = 0; m < measured.size(); ++m) {
      Row& row = measured[m];
      row.section = section;
      if (is_baseline) baseline_ms.push_back(row.ms);
      row.max_diff = diff;
      row.speedup = baseline_ms[m] / row.ms;
      std::fprintf(stderr, "  %-8s %-22s %-4s %-12s B=%-3lld H=%-3lld N=%-5lld d=%-3lld %-6s %9.3f ms %7.2f TFLOP/s\n",
                   section.c_str(), row.kernel.c_str(), common::name(row.precision), row.method.c_str(),
                   (long long)shape.batch, (long long)shape.heads, (long long)shape.seq_q, (long long)shape.head_dim,
                   causal ? "causal" : "", row.ms, row.tflops);
      rows.push_back(row);
    }
    if (is_baseline) baseline = std::move(out);
  }
  return nonfinite;
}

/// `x` as CSV text, or "" when it is NaN (a figure that does not apply to the row).
std::string empty_if_nan(double x) {
  if (std::isnan(x)) return "";
  std::ostringstream out;
  out << x;
  return out.str();
}

/// The figure `name` of a resource report, as CSV text ("" when the kernel has none).
std::string figure(const common::Figures& figures, const std::string& name) {
  for (const auto& [key, value] : figures) {
    if (key == name) {
      std::ostringstream text;
      text << value;
      return text.str();
    }
  }
  return "";
}

/// Today's date, UTC, as YYYY-MM-DD.
std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", &tm);
  return text;
}

/// Whether `name` (e.g. "step09_half_precision") is picked by `list`: step numbers
/// ("4", "09") or names, comma-separated; an empty list picks every step.
bool picked(const std::vector<std::string>& list, const std::string& name) {
  if (list.empty()) return true;
  for (const std::string& want : list) {
    if (want == name) return true;
    if (!want.empty() && want.size() <= 2 &&
        std::all_of(want.begin(), want.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
      const std::string number = (want.size() == 1 ? "0" : "") + want;
      if (name.rfind("step" + number + "_", 0) == 0) return true;
    }
  }
  return false;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

}  // namespace

int main(int argc, char** argv) {
  return common::guarded_main("gpu_bench", [&]() -> int {
    std::string csv_path;
    bool quick = false;
    std::vector<std::string> sections = {"grid", "long", "sweep"}, steps;
    int64_t steps_seq = 4096;
    common::Precision half = common::Precision::bf16;
    CLI::App app("The GPU benchmark: every CUDA step beside a cuBLAS standard attention, in one run.", "gpu_bench");
    common::cli::add_csv_option(app, csv_path, "write every row as CSV to FILE (whole, or not at all)");
    app.add_flag("--quick", quick, "N <= 1024 only: a smoke test");
    app.add_option_function<std::string>(
           "--sections",
           [&](const std::string& text) {
             sections = split_commas(text);
             for (const std::string& s : sections) {
               if (s != "grid" && s != "long" && s != "sweep" && s != "steps" && s != "backward") {
                 throw common::InputError(
                     "--sections takes grid, long, sweep, steps and backward, comma-separated; got '" + s + "'");
               }
             }
             if (sections.empty()) throw common::InputError("--sections needs at least one section");
           },
           "the sections to run, comma-separated: grid, long, sweep (the default), steps and backward")
        ->type_name("LIST");
    app.add_option_function<std::string>(
           "--steps", [&](const std::string& text) { steps = split_commas(text); },
           "only these GPU steps (numbers or names, comma-separated, e.g. 4,9,17); cuBLAS is always timed")
        ->type_name("LIST");
    app.add_option_function<std::string>(
           "--seq", [&](const std::string& text) { steps_seq = common::cli::parse_int("--seq", text, 1, 1 << 20); },
           "N_q = N_kv of the steps section (default 4096)")
        ->type_name("N");
    app.add_option_function<std::string>(
           "--half-dtype",
           [&](const std::string& text) {
             if (text != "bf16" && text != "fp16") throw common::InputError("--half-dtype takes bf16 or fp16");
             half = text == "bf16" ? common::Precision::bf16 : common::Precision::fp16;
           },
           "the steps section's precision for the 16-bit steps: bf16 (default) or fp16")
        ->type_name("TYPE");
    app.footer(
        "Exit codes: 0 ok, 1 a kernel gave a non-finite O, 2 bad option, no GPU, or a failed write, "
        "3 a CUDA error.");
    if (!common::cli::parse(app, argc, argv)) return 0;  // --help
    if (!csv_path.empty()) common::check_writable(csv_path);
    common::cuda::require_gpu("gpu_bench");
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const std::string date = utc_date();
    std::printf("GPU: %s, %d SMs, %s\n", prop.name, prop.multiProcessorCount, date.c_str());
    std::printf(
        "timing: every kernel, cuBLAS included, at sustained clocks: back_to_back (%.2f s of warm-up, then K "
        "calls between two events) and cuda_graph (the K calls captured in a CUDA graph, replayed); per "
        "call = elapsed / K, median of %d repetitions\n",
        kWarmupMs / 1e3, kRepetitions);
    const auto want = [&](const char* section) {
      return std::find(sections.begin(), sections.end(), section) != sections.end();
    };
    const auto keep = [&](const std::string& name) { return picked(steps, name); };
    // A step built for one GPU generation (the Hopper steps: 90) runs only on it.
    const int capability = prop.major * 10 + prop.minor;
    const auto runs_here = [&](const Entry& e) {
      const int needed = e.step.gpu->compute_capability;
      if (needed == 0 || needed == capability) return true;
      std::printf("%s: skipped (its kernel runs on compute capability %d.%d; this GPU is %d.%d)\n", e.step.name.c_str(),
                  needed / 10, needed % 10, prop.major, prop.minor);
      return false;
    };

    const std::vector<Entry> all = entries(false, keep);
    std::vector<Entry> sweep_list;
    for (const Entry& e : all) {
      if (e.in_sweep) sweep_list.push_back(e);
    }
    const std::vector<int64_t> lengths =
        quick ? std::vector<int64_t>{512, 1024} : std::vector<int64_t>{512, 1024, 2048, 4096, 8192};
    std::vector<Row> rows;
    int nonfinite = 0;
    if (want("grid")) {
      for (int64_t d : {64, 128}) {
        for (int64_t n : lengths) {
          for (bool causal : {false, true}) {
            nonfinite += run_problem("grid", all, common::Shape{4, 16, n, n, d}, causal, half, rows);
          }
        }
      }
    }
    // The last (fastest) fp32 step, beside cuBLAS, goes on to N = 16384, where the
    // first GPU steps take seconds a run.
    if (want("long") && !quick && all.size() > 1) {
      for (int64_t d : {64, 128}) {
        for (bool causal : {false, true}) {
          nonfinite +=
              run_problem("long", {all.front(), all.back()}, common::Shape{4, 16, 16384, 16384, d}, causal, half, rows);
        }
      }
    }
    if (want("sweep")) {
      const int64_t sweep_n = quick ? 1024 : 4096;
      for (int64_t bh : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
        nonfinite += run_problem("sweep", sweep_list, common::Shape{1, bh, sweep_n, sweep_n, 128}, false, half, rows);
      }
    }
    if (want("steps")) {
      std::vector<Entry> every;
      for (const Entry& e : entries(true, keep)) {
        if (runs_here(e)) every.push_back(e);
      }
      for (int64_t d : {64, 128}) {
        for (bool causal : {false, true}) {
          nonfinite += run_problem("steps", every, common::Shape{4, 16, steps_seq, steps_seq, d}, causal, half, rows);
        }
      }
    }

    if (want("backward")) {
      for (const common::StepInfo& step : tour::built_gpu_steps()) {
        if (!step.gpu->launch_backward || !keep(step.name)) continue;
        for (int64_t n : quick ? std::vector<int64_t>{1024} : std::vector<int64_t>{1024, 4096}) {
          for (int64_t d : {64, 128}) {
            for (bool causal : {false, true}) {
              const common::Shape shape{4, 16, n, n, d};
              for (Row& row : measure_backward(step, common::make_random_problem(shape, causal, std::nullopt, 2026))) {
                row.section = "backward";
                row.speedup = std::nan("");  // no cuBLAS backward: the CSV leaves it empty
                row.max_diff = std::nan("");
                std::fprintf(stderr, "  backward %-40s %-12s N=%-5lld d=%-3lld %-6s %9.3f ms %7.2f TFLOP/s\n",
                             row.kernel.c_str(), row.method.c_str(), (long long)n, (long long)d, causal ? "causal" : "",
                             row.ms, row.tflops);
                rows.push_back(row);
              }
            }
          }
        }
      }
    }

    std::printf(
        "\n%s, %s; sustained timing (method: back_to_back or cuda_graph), median of %d repetitions of K "
        "calls\n",
        prop.name, date.c_str(), kRepetitions);
    std::printf("%-6s %-22s %-4s %-12s %5s %5s %5s %3s %-6s %10s %8s %9s %10s\n", "", "kernel", "type", "method", "B·H",
                "N", "K", "d", "mask", "ms / call", "TFLOP/s", "vs cuBLAS", "max|ΔO|");
    for (const Row& r : rows) {
      std::printf("%-6s %-22s %-4s %-12s %5lld %5lld %5d %3lld %-6s %10.3f %8.2f %8.2fx %10.2e\n", r.section.c_str(),
                  r.kernel.c_str(), common::name(r.precision), r.method.c_str(), (long long)r.shape.batch_heads(),
                  (long long)r.shape.seq_q, r.calls, (long long)r.shape.head_dim, r.causal ? "causal" : "none", r.ms,
                  r.tflops, r.speedup, r.max_diff);
    }
    if (!csv_path.empty()) {
      const char* resource_columns[] = {"threads",       "registers", "local_bytes", "smem_bytes",
                                        "blocks_per_sm", "B_r",       "B_c"};
      std::ostringstream csv;
      csv << "gpu,date,section,method,kernel,dtype,batch,heads,seq_q,seq_kv,head_dim,causal,calls,reps,median_ms,"
             "tflops,speedup_vs_cublas,max_abs_diff_vs_cublas";
      for (const char* c : resource_columns) csv << ',' << c;
      csv << '\n';
      for (const Row& r : rows) {
        csv << prop.name << ',' << date << ',' << r.section << ',' << r.method << ',' << r.kernel << ','
            << common::name(r.precision) << ',' << r.shape.batch << ',' << r.shape.heads << ',' << r.shape.seq_q << ','
            << r.shape.seq_kv << ',' << r.shape.head_dim << ',' << (r.causal ? 1 : 0) << ',' << r.calls << ','
            << kRepetitions << ',' << r.ms << ',' << r.tflops << ',' << empty_if_nan(r.speedup) << ','
            << empty_if_nan(r.max_diff);
        for (const char* c : resource_columns) csv << ',' << figure(r.resources, c);
        csv << '\n';
      }
      common::write_file(csv_path, csv.str());
      std::printf("\nCSV written to %s\n", csv_path.c_str());
    }
    common::flush_stdout();
    if (nonfinite > 0) {
      std::fprintf(stderr, "gpu_bench: %d kernel(s) gave a non-finite O; see above\n", nonfinite);
      return 1;
    }
    return 0;
  });
}
