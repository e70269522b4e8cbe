/// \file dlpack_tensors.hpp
/// \brief GPU steps on other frameworks' CUDA tensors, through DLPack, without a copy.
///
/// DLPack is how array libraries lend each other memory: `x.__dlpack__(stream=s)`
/// returns a capsule holding a DLManagedTensor (data pointer, device, dtype,
/// shape, strides), and `x.__dlpack_device__()` says where the data lives. Any
/// framework that speaks it (PyTorch, CuPy, JAX) can hand a GPU step its
/// tensors; the step's GpuKernel::launch then runs on those pointers directly.
///
/// Streams follow the Python array API: the consumer (this module) passes the
/// stream it will launch on as `stream=`, and the producer makes that stream
/// wait for the work that writes the tensor. The stream is an integer: a
/// cudaStream_t's value, 1 for the legacy default stream, 2 for the per-thread
/// default stream (the same numbers as cudaStreamLegacy and cudaStreamPerThread).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/step.hpp"

namespace flash_python {

namespace py = pybind11;

/// The DLPack stream number for a launch on `stream` (a cudaStream_t's value;
/// None or 0, CUDA's null stream, is the legacy default stream, which DLPack
/// calls 1 because it reserves 0). ValueError for a negative number.
int64_t dlpack_stream(std::optional<int64_t> stream);

/// Checks Q, K and V for `step` as its launch would, before any output is
/// allocated: a GPU present (NoGpuError); CUDA tensors of one dtype the step
/// computes in (float32: fp32, bfloat16: bf16, float16: fp16; TypeError naming
/// the step's dtypes otherwise), contiguous, 16-byte aligned, on one device,
/// shaped [B, H, N, d] and agreeing (InputError); a head dimension the step was
/// compiled for. Returns the shape.
common::Shape check_inputs(const common::StepInfo& step, py::handle q, py::handle k, py::handle v,
                           std::optional<int64_t> stream);

/// The DLPack device id of Q (after check_inputs: a CUDA device).
int device_of(py::handle q);

/// Runs `step`'s kernel on DLPack tensors: O and L are written in place, in the
/// precision of Q's dtype (DeviceArgs::precision). Each tensor is an object with
/// `__dlpack__` (asked for a capsule on `stream`) or a "dltensor" capsule already made
/// for `stream` by its framework (taken as it is: its producer's work must already be
/// ordered before `stream`'s, as it is for PyTorch tensors on the current stream).
/// `o` is [B, H, N_q, d] of Q's dtype, `lse` float32 [B, H, N_q], `workspace` at least
/// step.gpu->workspace_bytes(shape, causal) bytes (None when that is 0), all on Q's
/// device, contiguous and sharing no memory with Q, K, V or each other. The
/// kernel is enqueued on `stream` and not waited for. With `check_finite`, Q, K
/// and V are first checked for NaN and infinity on the device (one small kernel
/// each and a wait for the stream).
void launch(const common::StepInfo& step, py::handle q, py::handle k, py::handle v, py::handle o, py::handle lse,
            py::handle workspace, bool causal, std::optional<double> scale, std::optional<int64_t> stream,
            bool check_finite);

/// Runs `step`'s backward kernels on DLPack tensors (GpuKernel::launch_backward):
/// reads Q, K, V, the forward's O and L, and dO; writes dQ, dK, dV in place. Q, K,
/// V are checked as for launch(); O, dO, dQ are [B, H, N_q, d] and dK, dV
/// [B, H, N_kv, d], all of Q's dtype; L is float32 [B, H, N_q]; `workspace` at
/// least step.gpu->backward_workspace_bytes(shape, deterministic) bytes (None
/// when that is 0); all on Q's device and contiguous, the outputs and the
/// workspace sharing no memory with any other tensor. Enqueued on `stream`, not
/// waited for; the inputs are not scanned for NaN.
void launch_backward(const common::StepInfo& step, py::handle q, py::handle k, py::handle v, py::handle o,
                     py::handle lse, py::handle d_o, py::handle dq, py::handle dk, py::handle dv, py::handle workspace,
                     bool causal, std::optional<double> scale, bool deterministic, std::optional<int64_t> stream);

/// "float32", "bfloat16", "float16" (or another DLPack dtype's name): the
/// element type of a CUDA tensor lent through DLPack on `stream`.
std::string dtype_of(py::handle tensor, std::optional<int64_t> stream);

/// True when a CUDA GPU can be used (the driver loads and a device is there).
bool gpu_available();

/// Device memory owned by this module and lent through DLPack: the outputs of
/// a step called with tensors of a framework the Python package cannot
/// allocate with (it allocates with PyTorch and CuPy). The caller's
/// `from_dlpack` takes it; the memory lives as long as this object or any
/// tensor made from it.
class DeviceArray {
 public:
  /// Allocates an uninitialised array of `dims` on CUDA device `device`, of
  /// `dtype`: "float32", "bfloat16" or "float16" (TypeError for another).
  DeviceArray(std::vector<int64_t> dims, int device, const std::string& dtype);
  /// The dimensions.
  const std::vector<int64_t>& dims() const { return dims_; }
  /// "float32", "bfloat16" or "float16".
  std::string dtype() const;
  /// `__dlpack__`: a "dltensor" capsule lending the memory. The data is ready:
  /// the module waits for the launch before handing a DeviceArray out, so
  /// `stream` needs no synchronisation.
  py::capsule dlpack(py::object stream, py::object max_version, py::object dl_device, py::object copy) const;
  /// `__dlpack_device__`: (kDLCUDA, device).
  py::tuple dlpack_device() const;

 private:
  std::vector<int64_t> dims_;
  int device_ = 0;
  common::Precision precision_ = common::Precision::fp32;
  std::shared_ptr<void> memory_;  // cudaFree when the last owner lets go
};

/// Waits until the work enqueued on `stream` so far has finished.
void synchronize(std::optional<int64_t> stream);

}  // namespace flash_python
