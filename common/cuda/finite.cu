/// \file finite.cu
/// \brief The device-side check for NaN and infinity in Q, K and V.
#include "common/cuda/finite.cuh"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/cuda/cuda_check.cuh"
#include "common/cuda/gpu_step.cuh"

namespace common::cuda {

namespace {

constexpr int kThreads = 256;
constexpr unsigned long long kNone = ~0ull;  // "no bad element": larger than any index

/// `*first` becomes the smallest index of a non-finite element of `data`
/// (atomicMin over the threads; each thread stops at its own first one).
__global__ void first_non_finite_kernel(const float* __restrict__ data, int64_t count,
                                        unsigned long long* first) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < count; e += stride) {
    if (!isfinite(data[e])) {
      atomicMin(first, static_cast<unsigned long long>(e));
      return;
    }
  }
}

}  // namespace

void require_finite_inputs(const DeviceArgs& args) {
  const Shape& s = args.shape;
  struct Input {
    const float* data;
    int64_t count, seq;
    const char* name;
  };
  const Input inputs[] = {{args.q_as<float>(), s.q_elements(), s.seq_q, "q"},
                          {args.k_as<float>(), s.kv_elements(), s.seq_kv, "k"},
                          {args.v_as<float>(), s.kv_elements(), s.seq_kv, "v"}};
  const cudaStream_t stream = stream_of(args);
  // Three results in stream-ordered memory: no device-wide synchronisation to
  // allocate or free it, and no state shared between concurrent callers.
  unsigned long long* first = nullptr;
  CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&first), 3 * sizeof(unsigned long long), stream));
  CUDA_CHECK(cudaMemsetAsync(first, 0xFF, 3 * sizeof(unsigned long long), stream));  // = kNone each
  for (int t = 0; t < 3; ++t) {
    // Enough blocks to fill a GPU; each thread strides over the rest.
    const int64_t blocks = (inputs[t].count + kThreads - 1) / kThreads;
    first_non_finite_kernel<<<unsigned(blocks < 4096 ? blocks : 4096), kThreads, 0, stream>>>(
        inputs[t].data, inputs[t].count, first + t);
    CUDA_CHECK_LAUNCH();
  }
  unsigned long long found[3];
  CUDA_CHECK(cudaMemcpyAsync(found, first, sizeof(found), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaFreeAsync(first, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));  // `found` is read on the host next
  for (int t = 0; t < 3; ++t) {
    if (found[t] == kNone) continue;
    float value = 0;
    CUDA_CHECK(cudaMemcpy(&value, inputs[t].data + found[t], sizeof(float), cudaMemcpyDeviceToHost));
    throw InputError(non_finite_message(value, int64_t(found[t]), s, inputs[t].seq, inputs[t].name));
  }
}

}  // namespace common::cuda
