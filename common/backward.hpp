/// \file backward.hpp
/// \brief The contract every backward step implements: its inputs, its gradients, their checks.
///
/// A backward step extends a forward step: it keeps that step's forward pass and
/// adds `stepNN::attention_backward(problem, inputs, options) -> Gradients`.
/// From Q, K, V, the forward's O and L, and dO = ∂loss/∂O it returns
/// dQ, dK, dV, float32 at the interface like every tensor here. In the paper's
/// notation (FlashAttention-2, Algorithm 2):
///
///     D_i   = rowsum(dO_i ∘ O_i)
///     P_ij  = exp(S_ij − L_i)            S_ij = scale · Q_i K_jᵀ, masked when causal
///     dV_j += P_ijᵀ dO_i
///     dP_ij = dO_i V_jᵀ
///     dS_ij = P_ij ∘ (dP_ij − D_i)
///     dQ_i += scale · dS_ij K_j
///     dK_j += scale · dS_ijᵀ Q_i
///
/// This header is C++17 so that CUDA sources can include it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/problem.hpp"

namespace common {

/// What the backward pass needs beyond the problem's Q, K and V.
struct BackwardInputs {
  std::vector<float> o;  ///< O, (B, H, N_q, d): the forward's output
  std::vector<float> lse;  ///< L, (B, H, N_q): the forward's logsumexp, natural log
  std::vector<float> d_o;  ///< dO = ∂loss/∂O, (B, H, N_q, d)
};

/// What a backward step returns.
struct Gradients {
  std::vector<float> dq;  ///< dQ, (B, H, N_q, d)
  std::vector<float> dk;  ///< dK, (B, H, N_kv, d)
  std::vector<float> dv;  ///< dV, (B, H, N_kv, d)
  /// Extra working memory the backward allocated beyond inputs and outputs, in
  /// bytes (measured, as Result::peak_bytes).
  int64_t peak_bytes = 0;
  std::optional<Traffic> traffic;  ///< counted HBM traffic, where the step models it
  /// Step-specific figures to print beside the standard ones (name, value).
  std::vector<std::pair<std::string, double>> extra;
};

/// Gradients of the right sizes with every element NaN, so that an element the
/// step forgets to write fails every check. Backward steps start from this.
Gradients allocate_gradients(const Shape& shape);

/// Gradients (dQ, dK, dV) that are NaN or infinite.
int64_t count_nonfinite(const Gradients& gradients);

/// validate(problem), then O, L and dO of the right lengths and finite: a NaN
/// or an infinity is refused with an InputError naming the tensor and the
/// element's index, as for Q, K and V.
void validate(const Problem& problem, const BackwardInputs& inputs);

/// A step's backward pass: `stepNN::attention_backward`.
using BackwardFn = std::function<Gradients(const Problem&, const BackwardInputs&, const Options&)>;

/// One backward problem made ready to run many times (a GPU step uploads once).
class BackwardSession {
 public:
  virtual ~BackwardSession() = default;
  /// Runs the backward pass once (GPU: launched, waited for and checked).
  virtual void run() = 0;
  /// Runs it once more and returns its time in milliseconds: the kernels alone
  /// between CUDA events on a GPU, the wall clock on the CPU.
  virtual double timed_run_ms() = 0;
  /// dQ, dK, dV and the step's counters of the last run (GPU: downloaded now).
  virtual Gradients gradients() = 0;
  /// True when timed_run_ms() times the kernels alone (CUDA events).
  virtual bool kernel_only() const = 0;
};

/// Opens a backward session: validates and, on a GPU, uploads.
using OpenBackwardFn =
    std::function<std::unique_ptr<BackwardSession>(const Problem&, const BackwardInputs&, const Options&)>;

/// Device pointers and sizes of one backward pass, as a GPU step's launch sees
/// them: DeviceArgs' Q, K, V (and O, L) plus dO in, dQ, dK, dV out, all
/// contiguous [B, H, N, d] in `precision` except L (fp32).
struct DeviceBackwardArgs {
  Shape shape;  ///< sizes
  bool causal = false;  ///< top-left aligned mask
  float scale = 1.0f;  ///< softmax scale
  Precision precision = Precision::fp32;  ///< the element type of every tensor but L
  const void* q = nullptr;  ///< Q: (B, H, N_q, d)
  const void* k = nullptr;  ///< K: (B, H, N_kv, d)
  const void* v = nullptr;  ///< V: (B, H, N_kv, d)
  const void* o = nullptr;  ///< O: (B, H, N_q, d)
  const float* lse = nullptr;  ///< L: (B, H, N_q), fp32
  const void* d_o = nullptr;  ///< dO: (B, H, N_q, d)
  void* dq = nullptr;  ///< dQ: (B, H, N_q, d), written by the launch
  void* dk = nullptr;  ///< dK: (B, H, N_kv, d), written by the launch
  void* dv = nullptr;  ///< dV: (B, H, N_kv, d), written by the launch
  void* workspace = nullptr;  ///< the launch's backward_workspace_bytes(shape) bytes, or nullptr
  void* stream = nullptr;  ///< the cudaStream_t to launch on (nullptr: the default stream)
  bool deterministic = false;  ///< dQ summed in a fixed order (bitwise-repeatable), where the step offers it
};

}  // namespace common
