/// \file device_problem.cuh
/// \brief Q, K, V on the device, O and L allocated and poisoned: the tensors of one problem on a GPU.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/cuda/cuda_check.cuh"
#include "common/cuda/device_buffer.cuh"
#include "common/precision.hpp"
#include "common/problem.hpp"

namespace common::cuda {

/// Bytes of one element of Q, K, V or O in `precision`: 4 for fp32, 2 for bf16 and fp16.
inline size_t element_bytes(Precision precision) { return precision == Precision::fp32 ? 4 : 2; }

/// `values` in `precision` (fp32 as they are; bf16, fp16 rounded to nearest even), as bytes on the device.
inline DeviceBuffer<unsigned char> upload_as(const std::vector<float>& values, Precision precision) {
  std::vector<unsigned char> bytes(values.size() * element_bytes(precision));
  for (size_t i = 0; i < values.size(); ++i) {
    if (precision == Precision::fp32) {
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t bits = precision == Precision::bf16 ? to_bf16_bits(values[i]) : to_fp16_bits(values[i]);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  return DeviceBuffer<unsigned char>(bytes);
}

/// A device tensor of `precision` elements, downloaded and widened to float.
inline std::vector<float> download_as_float(const DeviceBuffer<unsigned char>& tensor, Precision precision) {
  std::vector<unsigned char> bytes;
  tensor.download(bytes);
  std::vector<float> values(bytes.size() / element_bytes(precision));
  for (size_t i = 0; i < values.size(); ++i) {
    if (precision == Precision::fp32) {
      std::memcpy(&values[i], bytes.data() + 4 * i, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      values[i] = precision == Precision::bf16 ? from_bf16_bits(bits) : from_fp16_bits(bits);
    }
  }
  return values;
}

/// Q, K, V uploaded in the precision the step computes in; O (same precision)
/// and L (fp32) allocated on the device and poisoned.
struct DeviceProblem {
  Precision precision;  ///< the element type of q, k, v, o
  DeviceBuffer<unsigned char> q;  ///< Q: (B, H, N_q, d)
  DeviceBuffer<unsigned char> k;  ///< K: (B, H, N_kv, d)
  DeviceBuffer<unsigned char> v;  ///< V: (B, H, N_kv, d)
  DeviceBuffer<unsigned char> o;  ///< O: (B, H, N_q, d), poisoned
  DeviceBuffer<float> lse;  ///< L: (B, H, N_q), poisoned

  /// Refuses (InputError) a problem whose tensors plus `working_bytes` do not
  /// fit in the free device memory, before allocating anything; then uploads
  /// Q, K, V rounded once to `precision` (bf16, fp16: round to nearest even, as
  /// the GPU's own conversions; an fp16 input past 65504 is refused by name).
  DeviceProblem(const Problem& problem, int64_t working_bytes, const std::string& step_name, Precision p)
      : precision(p) {
    const Shape& s = problem.shape;
    const int64_t tensor_bytes = int64_t(element_bytes(p)) * (2 * s.q_elements() + 2 * s.kv_elements()) +
                                 int64_t(sizeof(float)) * s.lse_elements();
    require_device_memory(tensor_bytes + working_bytes, step_name);
    if (p != Precision::fp32) (void)rounded_inputs(problem, p);  // refuses what does not fit, by name
    q = upload_as(problem.q, p);
    k = upload_as(problem.k, p);
    v = upload_as(problem.v, p);
    o = DeviceBuffer<unsigned char>(size_t(s.q_elements()) * element_bytes(p));
    lse = DeviceBuffer<float>(static_cast<size_t>(s.lse_elements()));
    o.poison();  // 0xFF bytes: NaN as fp32, bf16 and fp16 alike
    lse.poison();
  }

  /// Copies O (widened to float) and L into `result`.
  void download(Result& result) const {
    result.o = download_as_float(o, precision);
    lse.download(result.lse);
  }
};

}  // namespace common::cuda
