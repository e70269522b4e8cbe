/// \file problem.hpp
/// \brief The contract every step implements: the problem, the result, the options.
///
/// Tensors are float32, contiguous, row-major, shaped `[batch, heads, seq, head_dim]`
/// (PyTorch's SDPA layout). This header is C++17 so that CUDA sources can include it.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/precision.hpp"

namespace common {

/// Sizes of one attention problem. Q is (B, H, N_q, d); K and V are (B, H, N_kv, d).
struct Shape {
  int64_t batch = 1;  ///< B
  int64_t heads = 1;  ///< H
  int64_t seq_q = 1;  ///< N_q, query rows
  int64_t seq_kv = 1;  ///< N_kv, key/value rows
  int64_t head_dim = 1;  ///< d

  int64_t batch_heads() const { return batch * heads; }  ///< B·H
  int64_t q_elements() const { return batch_heads() * seq_q * head_dim; }  ///< elements of Q and O
  int64_t kv_elements() const { return batch_heads() * seq_kv * head_dim; }  ///< elements of K and V
  int64_t lse_elements() const { return batch_heads() * seq_q; }  ///< elements of L
};

/// One-line description, e.g. "B=1 H=8 N_q=1024 N_kv=1024 d=64".
std::string describe(const Shape& shape);

/// The inputs of one forward pass.
struct Problem {
  Shape shape;  ///< sizes
  bool causal = false;  ///< top-left aligned mask: query i sees keys j <= i (PyTorch's convention)
  float scale = 1.0f;  ///< softmax scale applied to QK^T (1/sqrt(d) unless chosen)
  std::vector<float> q;  ///< (B, H, N_q, d)
  std::vector<float> k;  ///< (B, H, N_kv, d)
  std::vector<float> v;  ///< (B, H, N_kv, d)
};

/// The default softmax scale, 1/sqrt(d).
float default_scale(int64_t head_dim);

/// Thrown for any input that a step cannot run: the message is one line that
/// names what is wrong and what is allowed.
struct InputError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// Thrown by GPU steps when no usable CUDA device is present.
struct NoGpuError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Thrown when an output (a `.npy` file, a CSV file, standard output) cannot be
/// written completely: the message is one line naming the file and the reason.
struct OutputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The largest number of elements any one tensor may have (2^31 - 1), so that
/// every step, CPU or GPU, can index a tensor with 32-bit offsets per (b, h)
/// and 64-bit offsets overall without overflow.
inline constexpr int64_t kMaxTensorElements = (int64_t{1} << 31) - 1;

/// Checks sizes: all >= 1 and no tensor over kMaxTensorElements. Throws
/// InputError with a one-line message. Call it before allocating tensors.
void validate(const Shape& shape);

/// The Shape of Q, K and V given as dimension lists (as `.npy` files and
/// Python arrays carry them), then validate(shape). Each must be 4-D [B, H, N, d],
/// K and V the same shape, Q and K equal in B, H and d. `names` are the tensors'
/// names in the one-line InputError (e.g. "dir/q.npy", or "q" from Python).
Shape shape_of(const std::vector<int64_t>& q, const std::vector<int64_t>& k, const std::vector<int64_t>& v,
               const std::vector<std::string>& names = {"q", "k", "v"});

/// validate(shape), then tensors of the right length, a finite scale and finite
/// inputs. Q, K and V must hold finite numbers: a NaN or an infinity in an input
/// is refused with an InputError that names the tensor and the element's
/// (b, h, n, c) index, because attention's answer for it is NaN or undefined
/// and no tolerance rule can judge it.
void validate(const Problem& problem);

/// "[b=0, h=3, n=17, c=5]": where element `element` of a (B, H, `seq`, d) tensor is.
std::string element_index(const Shape& shape, int64_t seq, int64_t element);

/// Throws InputError naming `tensor` and the element's (b, h, n, c) index if
/// `data` (shaped (B, H, `seq`, d) as in `shape`) holds a NaN or an infinity.
void require_finite(const std::vector<float>& data, const Shape& shape, int64_t seq, const std::string& tensor);

/// The message of require_finite for `value` at flat index `element` of a
/// (B, H, `seq`, d) tensor, e.g. "Q holds nan at [b=0, h=1, n=2, c=3]; inputs
/// must be finite numbers" (also used where the data lives on a GPU).
std::string non_finite_message(float value, int64_t element, const Shape& shape, int64_t seq,
                               const std::string& tensor);

/// Throws InputError unless `head_dim` is one of `supported` (empty = any d >= 1).
void require_head_dim(int64_t head_dim, const std::vector<int64_t>& supported, const std::string& step_name);

/// Bytes moved between "HBM" and the chip, as counted by steps that model it.
struct Traffic {
  int64_t hbm_read_bytes = 0;  ///< bytes read from global memory
  int64_t hbm_write_bytes = 0;  ///< bytes written to global memory
};

/// What a step returns.
struct Result {
  std::vector<float> o;  ///< (B, H, N_q, d)
  std::vector<float> lse;  ///< L = m + log(l), natural log, (B, H, N_q)
  /// Extra working memory the step allocated beyond inputs and outputs, in bytes
  /// (measured by common::Workspace / device allocations, not estimated).
  int64_t peak_bytes = 0;
  std::optional<Traffic> traffic;  ///< counted HBM traffic, where the step models it
  /// Step-specific figures to print beside the standard ones (name, value).
  std::vector<std::pair<std::string, double>> extra;
};

/// A result of the right size with every element set to NaN, so an element the
/// step forgets to write fails every check. Steps start from this.
Result allocate_result(const Shape& shape);

/// Per-run options of the algorithm. A step ignores the ones that mean nothing
/// to it. How often to run and what to time is the driver's business
/// (common/driver.hpp), not the algorithm's.
struct Options {
  /// On-chip budget M in floats, for steps that derive tile sizes from it
  /// (0 = the step's own default, which only the step knows: see sram_budget).
  int64_t sram_floats = 0;
  /// Where to print the step-by-step trace (`--trace`); nullptr = no trace.
  std::ostream* trace = nullptr;
  /// Show progress on the terminal for long runs.
  bool progress = false;
  /// The precision to compute in (`--dtype`): one of the step's
  /// StepInfo::precisions, which open_session enforces. fp32 steps compute in fp32.
  Precision precision = Precision::fp32;
  /// Backward steps (`--deterministic`): sum dQ in a fixed order, so that repeated
  /// runs give the same bits, where the step's default order depends on timing.
  bool deterministic = false;
};

/// The budget M a step uses: `options.sram_floats`, or the step's default when
/// it is 0. The one place where the default is resolved.
inline int64_t sram_budget(const Options& options, int64_t step_default) {
  return options.sram_floats > 0 ? options.sram_floats : step_default;
}

}  // namespace common
