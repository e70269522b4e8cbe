/// \file finite.cu
/// \brief The device-side check for NaN and infinity in Q, K and V, in any precision a step takes.
#include "common/cuda/finite.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/cuda/cuda_check.cuh"
#include "common/cuda/gpu_step.cuh"
#include "common/precision.hpp"

namespace common::cuda {

namespace {

constexpr int kThreads = 256;
constexpr unsigned long long kNone = ~0ull;  // "no bad element": larger than any index

/// `*first` becomes the smallest index of a non-finite element of `data`
/// (atomicMin over the threads; each thread stops at its own first one). T is
/// float, __nv_bfloat16 or __half: widening a 16-bit value to float is exact,
/// and keeps NaN a NaN and infinity an infinity.
template <class T>
__global__ void first_non_finite_kernel(const T* __restrict__ data, int64_t count, unsigned long long* first) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < count; e += stride) {
    if (!isfinite(static_cast<float>(data[e]))) {
      atomicMin(first, static_cast<unsigned long long>(e));
      return;
    }
  }
}

/// Enqueues the search over `count` elements of type T at `data` on `stream`.
template <class T>
void launch_search(const void* data, int64_t count, unsigned long long* first, cudaStream_t stream) {
  // Enough blocks to fill a GPU; each thread strides over the rest.
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  first_non_finite_kernel<T>
      <<<unsigned(blocks < 4096 ? blocks : 4096), kThreads, 0, stream>>>(static_cast<const T*>(data), count, first);
  CUDA_CHECK_LAUNCH();
}

/// The element at `data[index]`, of `precision`, copied to the host and widened to float (exact).
float element_value(const void* data, int64_t index, Precision precision) {
  if (precision == Precision::fp32) {
    float value = 0;
    CUDA_CHECK(cudaMemcpy(&value, static_cast<const float*>(data) + index, sizeof(float), cudaMemcpyDeviceToHost));
    return value;
  }
  uint16_t bits = 0;
  CUDA_CHECK(cudaMemcpy(&bits, static_cast<const uint16_t*>(data) + index, sizeof(bits), cudaMemcpyDeviceToHost));
  return precision == Precision::bf16 ? from_bf16_bits(bits) : from_fp16_bits(bits);
}

}  // namespace

void require_finite_inputs(const DeviceArgs& args) {
  const Shape& s = args.shape;
  struct Input {
    const void* data;
    int64_t count, seq;
    const char* name;
  };
  const Input inputs[] = {{args.q, s.q_elements(), s.seq_q, "q"},
                          {args.k, s.kv_elements(), s.seq_kv, "k"},
                          {args.v, s.kv_elements(), s.seq_kv, "v"}};
  const cudaStream_t stream = stream_of(args);
  // Three results in stream-ordered memory: no device-wide synchronisation to
  // allocate or free it, and no state shared between concurrent callers.
  unsigned long long* first = nullptr;
  CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&first), 3 * sizeof(unsigned long long), stream));
  CUDA_CHECK(cudaMemsetAsync(first, 0xFF, 3 * sizeof(unsigned long long), stream));  // = kNone each
  for (int t = 0; t < 3; ++t) {
    switch (args.precision) {
      case Precision::fp32: launch_search<float>(inputs[t].data, inputs[t].count, first + t, stream); break;
      case Precision::bf16: launch_search<__nv_bfloat16>(inputs[t].data, inputs[t].count, first + t, stream); break;
      case Precision::fp16: launch_search<__half>(inputs[t].data, inputs[t].count, first + t, stream); break;
    }
  }
  unsigned long long found[3];
  CUDA_CHECK(cudaMemcpyAsync(found, first, sizeof(found), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaFreeAsync(first, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));  // `found` is read on the host next
  for (int t = 0; t < 3; ++t) {
    if (found[t] == kNone) continue;
    const float value = element_value(inputs[t].data, int64_t(found[t]), args.precision);
    throw InputError(non_finite_message(value, int64_t(found[t]), s, inputs[t].seq, inputs[t].name));
  }
}

}  // namespace common::cuda
