/// \file step.hpp
/// \brief How a step describes itself to the program driver, the tour, the benchmarks and Python.
///
/// Every step has the same entry point, `stepNN::attention_forward(problem,
/// options) -> Result`, and a `describe()` that returns a StepInfo. A CPU step
/// gives its forward pass; a GPU step gives its kernel launch on device
/// pointers (GpuKernel), and common/ builds the rest from it: uploading once,
/// timing launches with CUDA events, downloading once (common/cuda/gpu_step.cuh).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/backward.hpp"
#include "common/problem.hpp"

namespace common {

/// A step's forward pass: `stepNN::attention_forward`.
using ForwardFn = std::function<Result(const Problem&, const Options&)>;

/// One problem made ready to run many times: a GPU step uploads Q, K and V once
/// when the session opens, and downloads O and L once, when asked for the result.
class Session {
 public:
  virtual ~Session() = default;
  /// Runs the forward pass once (GPU: one launch, waited for and checked).
  virtual void run() = 0;
  /// Runs the forward pass once more and returns its time in milliseconds: the
  /// kernel alone between CUDA events on a GPU, the wall clock on the CPU.
  virtual double timed_run_ms() = 0;
  /// O, L and the step's counters of the last run (GPU: downloaded now).
  virtual Result result() = 0;
  /// True when timed_run_ms() times the kernel alone (CUDA events).
  virtual bool kernel_only() const = 0;
};

/// Opens a session for `problem`: validates it and, on a GPU, uploads it.
using OpenFn = std::function<std::unique_ptr<Session>(const Problem&, const Options&)>;

/// Device pointers and sizes of one forward pass, as a GPU step's launch sees
/// them. Tensors are contiguous [B, H, N, d]; q, k, v, o hold `Problem`'s
/// numbers in `precision` (float for fp32; bf16/fp16 as 16-bit values, CUDA's
/// `__nv_bfloat16` and `__half`); L is always fp32.
/// Written without CUDA types so that C++ code (the driver, Python) can fill it.
struct DeviceArgs {
  Shape shape;  ///< sizes
  bool causal = false;  ///< top-left aligned mask
  float scale = 1.0f;  ///< softmax scale
  Precision precision = Precision::fp32;  ///< the element type of q, k, v and o
  const void* q = nullptr;  ///< Q: (B, H, N_q, d) on the device
  const void* k = nullptr;  ///< K: (B, H, N_kv, d)
  const void* v = nullptr;  ///< V: (B, H, N_kv, d)
  void* o = nullptr;  ///< O: (B, H, N_q, d), written by the kernel
  float* lse = nullptr;  ///< L: (B, H, N_q), fp32, written by the kernel
  void* workspace = nullptr;  ///< GpuKernel::workspace_bytes(shape, causal) bytes of device memory, or nullptr
  void* stream = nullptr;  ///< the cudaStream_t to launch on (nullptr: the default stream)

  /// `q` as the element type a kernel reads, e.g. `args.q_as<float>()`.
  template <class T>
  const T* q_as() const {
    return static_cast<const T*>(q);
  }
  /// `k` as the element type a kernel reads.
  template <class T>
  const T* k_as() const {
    return static_cast<const T*>(k);
  }
  /// `v` as the element type a kernel reads.
  template <class T>
  const T* v_as() const {
    return static_cast<const T*>(v);
  }
  /// `o` as the element type a kernel writes.
  template <class T>
  T* o_as() const {
    return static_cast<T*>(o);
  }
};

/// A named figure for a report, e.g. {"registers", 96}.
using Figures = std::vector<std::pair<std::string, double>>;

/// What a GPU step is, seen from the host: its kernel launch and its resources.
struct GpuKernel {
  /// Enqueues the forward pass on `args.stream` and checks the launch (it does
  /// not wait for the kernel). Throws InputError for a d it was not compiled for.
  std::function<void(const DeviceArgs& args)> launch;
  /// Bytes of global working memory a launch with that shape and mask needs
  /// (`args.workspace`), e.g. step 4's l and m arrays, step 24's counter of claimed
  /// tiles (causal only); empty = none ever.
  std::function<int64_t(const Shape& shape, bool causal)> workspace_bytes;
  /// The kernel's tiles and resources for head dimension d: B_r, B_c, shared
  /// memory, registers, local (spill) bytes, blocks per SM.
  std::function<Figures(int64_t head_dim)> resources;
  /// The one GPU generation the kernel's machine code runs on, as major·10 + minor
  /// (90: Hopper, built for sm_90a, whose wgmma no other GPU has); 0 = any GPU the
  /// build targets. A session on another GPU is refused with NoGpuError.
  int compute_capability = 0;
  /// Backward steps: enqueues the backward pass on `args.stream` and checks the
  /// launch (it does not wait). Empty for a forward-only step.
  std::function<void(const DeviceBackwardArgs& args)> launch_backward;
  /// Bytes of global working memory the backward launch needs (`args.workspace`),
  /// e.g. an fp32 dQ accumulator; empty = none.
  std::function<int64_t(const Shape& shape, bool deterministic)> backward_workspace_bytes;
  /// The backward kernels' tiles and resources for head dimension d (as `resources`).
  std::function<Figures(int64_t head_dim)> backward_resources;
  /// Backward steps: launch_backward can sum dQ in a fixed order (`args.deterministic`);
  /// false for a step whose dQ is summed by atomics only, which refuses the option.
  bool deterministic_dq = true;
};

/// Everything the driver needs to know about a step.
struct StepInfo {
  std::string name;  ///< directory name, e.g. "step02_tiled_cpu"
  std::string title;  ///< one line: what the step adds
  ForwardFn forward;  ///< the forward pass (every step)
  OpenFn open;  ///< a session for repeated runs (empty: built from `forward`)
  /// Backward steps: the backward pass, `stepNN::attention_backward` (empty for a
  /// forward-only step). Its forward is `forward`, the step it extends.
  BackwardFn backward;
  /// A backward session for repeated runs (empty: built from `backward`).
  OpenBackwardFn open_backward;
  /// Backward steps: the forward step this step extends, e.g. "step02_tiled_cpu".
  std::string extends;
  /// Backward steps: `--deterministic` changes how dQ is summed (a GPU step's
  /// atomics); false where the order is fixed anyway, or where the step has one way.
  bool has_deterministic_option = false;
  std::shared_ptr<const GpuKernel> gpu;  ///< GPU steps: the launch on device pointers
  std::vector<int64_t> head_dims;  ///< supported d (empty = any d >= 1)
  /// The precisions the step computes in (`--dtype`); the first is its native
  /// one, the default.
  std::vector<Precision> precisions{Precision::fp32};
  bool needs_gpu = false;  ///< runs on a CUDA GPU
  bool uses_sram_budget = false;  ///< takes `--sram-floats M`
  int64_t default_sram_floats = 0;  ///< M used when `--sram-floats` is not given
  bool has_trace = false;  ///< prints a step-by-step trace for `--trace`
  /// A rough rate of this step on one CPU core, in FLOP/s counted as
  /// 4·B·H·N_q·N_kv·(d + 16) (the 16 stands for each score's exp, max and sum),
  /// for telling a user up front that a run will take long (0 = not estimated).
  double cpu_flops_per_s = 0;
};

/// Throws InputError unless `step` computes in `precision`, e.g.
/// "step06_fa2 computes in fp32 only; --dtype bf16 is not one of its precisions".
void require_precision(const StepInfo& step, Precision precision);

/// Throws InputError when `deterministic` is asked of a GPU kernel that sums dQ by atomics
/// only (GpuKernel::deterministic_dq false), e.g. "step26_backward_fp32 sums dQ by atomicAdd
/// only; it has no deterministic mode". The backward session and the module's
/// launch_backward both ask it.
void require_dq_order(const std::string& name, const GpuKernel& kernel, bool deterministic);

/// Opens a session for `step` on `problem`: the step's own `open` where it has
/// one (GPU steps), otherwise a session that calls `step.forward` each run.
/// Refuses a precision the step does not compute in (require_precision).
std::unique_ptr<Session> open_session(const StepInfo& step, const Problem& problem, const Options& options);

/// Opens a backward session for `step` (which must have a backward): the
/// step's own `open_backward` where it has one, otherwise a session that calls
/// `step.backward` each run. Validates the inputs and refuses a precision the
/// step does not compute in.
std::unique_ptr<BackwardSession> open_backward_session(const StepInfo& step, const Problem& problem,
                                                       const BackwardInputs& inputs, const Options& options);

}  // namespace common
