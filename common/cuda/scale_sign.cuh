/// \file scale_sign.cuh
/// \brief A scale that is not positive, folded into Q_i: the one place the tensor-core
/// steps handle the sign of `scale`.
///
/// From step 13 on the scale is applied inside the exponential's fma,
/// P̃_ij = 2^(s · S_ij − m_new) with s = scale · log2 e and m_new = s · rowmax(S_ij): the
/// largest scaled score is s times the largest score only when s > 0 (for s < 0 it is s
/// times the smallest). So the kernel exponentiates with the positive factor
/// `exp2_factor(scale)` and, when scale ≤ 0, multiplies its tile of Q_i by sign(scale)
/// (−1 or 0, exact in 16 bits) as soon as the tile has landed: S_ij = sign · Q_i K_jᵀ, and
/// s · S_ij is then the score the caller asked for (all zeros when scale = 0).
#pragma once

#include <cmath>

#include "common/cuda/exp2.cuh"

namespace common::cuda {

/// |scale| · log2 e, or log2 e when scale = 0 (S_ij is then 0 and any factor gives it): the
/// positive factor that goes inside the exponentials once sign(scale) is in Q_i.
__device__ inline float exp2_factor(float scale) { return (scale == 0.0f ? 1.0f : fabsf(scale)) * kLog2e; }

/// Multiplies by sign(scale) (−1 or 0) every element of a (rows, d) tile of row stride ld
/// (ld = d for a dense tile, swizzled or not: then every element is touched all the same).
/// Thread t takes the 8-element chunks t, t + kThreads, …: the chunks that its own cp.async
/// copies wrote (load_tile's share), so no barrier is needed before it when each thread
/// waits for its own copies; a tile written by TMA needs the tile's barrier first.
/// Call it only when scale ≤ 0.
template <int kThreads, int d, int ld, class T>
__device__ void fold_scale_sign(T* tile, int rows, float scale) {
  static_assert(d % 8 == 0, "chunks of 8 elements (16 bytes) never cross a row");
  const T sign = scale < 0.0f ? T(-1.0f) : T(0.0f);
#pragma unroll
  for (int e = threadIdx.x; e < rows * d / 8; e += kThreads) {
    T* chunk = tile + (e / (d / 8)) * ld + 8 * (e % (d / 8));
#pragma unroll
    for (int k = 0; k < 8; ++k) chunk[k] = chunk[k] * sign;
  }
}

}  // namespace common::cuda
