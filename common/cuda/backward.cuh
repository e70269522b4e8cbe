/// \file backward.cuh
/// \brief The pass every GPU backward step begins with: D = rowsum(dO ∘ O).
///
/// Algorithm 2 needs, for each query row, D_i = Σ_c dO_ic · O_ic (the row's dot
/// product of the upstream gradient with the forward's output): dS_ij = P_ij ∘
/// (dP_ij − D_i). It is the same for every K/V tile, so the steps compute it once,
/// before their main kernel, into a workspace of B·H·N_q floats. Steps 26 to 32
/// share this kernel; step 33 writes its own, which also pads L and D per head.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda/cuda_check.cuh"

namespace common::cuda {

/// Threads a block of row_dot_kernel: 8 warps, a row each.
constexpr int kRowDotThreads = 256;

/// D = rowsum(dO ∘ O) over `rows` rows of d elements (T: float, __nv_bfloat16 or
/// __half; summed in fp32): one warp per row, its 32 lanes striding the row, then a
/// butterfly of shuffles that leaves the row's sum in every lane.
template <class T>
__global__ void __launch_bounds__(kRowDotThreads)
    row_dot_kernel(const T* __restrict__ dO, const T* __restrict__ O, float* __restrict__ D, int64_t rows, int d) {
  constexpr int kWarpSize = 32;
  const int64_t row = int64_t(blockIdx.x) * (kRowDotThreads / kWarpSize) + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= rows) return;  // the whole warp leaves together
  float sum = 0.0f;
  for (int c = lane; c < d; c += kWarpSize) sum = fmaf(float(dO[row * d + c]), float(O[row * d + c]), sum);
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) D[row] = sum;
}

/// Enqueues row_dot_kernel on `stream` for the `rows` = B·H·N_q rows of dO and O.
template <class T>
void launch_row_dot(const T* dO, const T* O, float* D, int64_t rows, int d, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kRowDotThreads / 32;
  row_dot_kernel<T>
      <<<unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock), kRowDotThreads, 0, stream>>>(dO, O, D, rows, d);
  CUDA_CHECK_LAUNCH();
}

}  // namespace common::cuda
