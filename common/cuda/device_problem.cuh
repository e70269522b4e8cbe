/// \file device_problem.cuh
/// \brief The host side every CUDA step shares: tensors on the device, the timed launches, the result.
///
/// A CUDA step's `attention_forward` is: check the GPU and its free memory,
/// upload Q, K, V, poison O and L, launch (once, or a warm-up and then
/// `options.repeat` launches timed with CUDA events), download O and L.
/// Only the launch differs between steps, so only the launch lives in the step.
#pragma once

#include <string>
#include <vector>

#include "common/cuda/cuda_check.cuh"
#include "common/cuda/device_buffer.cuh"
#include "common/problem.hpp"

namespace common::cuda {

/// Q, K, V uploaded; O and L allocated on the device and poisoned (NaN).
struct DeviceProblem {
  DeviceBuffer<float> q;    ///< Q: (B, H, N_q, d)
  DeviceBuffer<float> k;    ///< K: (B, H, N_kv, d)
  DeviceBuffer<float> v;    ///< V: (B, H, N_kv, d)
  DeviceBuffer<float> o;    ///< O: (B, H, N_q, d), poisoned
  DeviceBuffer<float> lse;  ///< L: (B, H, N_q), poisoned

  /// Refuses (InputError) a problem whose tensors plus `working_bytes` do not
  /// fit in the free device memory, before allocating anything; then uploads.
  DeviceProblem(const Problem& problem, int64_t working_bytes, const std::string& step_name) {
    const Shape& s = problem.shape;
    const int64_t tensor_bytes =
        int64_t(sizeof(float)) * (2 * s.q_elements() + 2 * s.kv_elements() + s.lse_elements());
    require_device_memory(tensor_bytes + working_bytes, step_name);
    q = DeviceBuffer<float>(problem.q);
    k = DeviceBuffer<float>(problem.k);
    v = DeviceBuffer<float>(problem.v);
    o = DeviceBuffer<float>(static_cast<size_t>(s.q_elements()));
    lse = DeviceBuffer<float>(static_cast<size_t>(s.lse_elements()));
    o.poison();
    lse.poison();
  }

  /// Copies O and L into `result`.
  void download(Result& result) const {
    o.download(result.o);
    lse.download(result.lse);
  }
};

/// Runs `launch()` (which must check its own launch) once; or, when
/// `options.repeat` > 0, once as a warm-up and then `repeat` times, each timed
/// with CUDA events. Returns the kernel-only times (empty without repeat). The
/// output of the last launch is what stays on the device.
template <class Launch>
std::vector<double> run_and_time(const Options& options, Launch&& launch) {
  std::vector<double> kernel_ms;
  launch();
  CUDA_CHECK(cudaDeviceSynchronize());  // a fault inside the kernel surfaces here
  if (options.repeat > 0) {
    EventTimer timer;
    for (int r = 0; r < options.repeat; ++r) {
      timer.start();
      launch();
      kernel_ms.push_back(timer.stop_ms());
    }
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  return kernel_ms;
}

}  // namespace common::cuda
