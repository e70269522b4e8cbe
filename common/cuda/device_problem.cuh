/// \file device_problem.cuh
/// \brief Q, K, V on the device, O and L allocated and poisoned: the tensors of one problem on a GPU.
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

}  // namespace common::cuda
