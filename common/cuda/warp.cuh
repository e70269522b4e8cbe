/// \file warp.cuh
/// \brief Small device helpers the CUDA steps share: reductions over groups of lanes, float4 arithmetic.
#pragma once

namespace common::cuda {

/// The largest `x` over the `kLanes` neighbouring lanes of a group (lanes
/// kLanes·g … kLanes·g + kLanes − 1, kLanes a power of two ≤ 32), in each of
/// them: log2(kLanes) butterfly shuffles. Every lane of the warp must call it.
template <int kLanes>
__device__ inline float lane_max(float x) {
  static_assert(kLanes > 0 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "kLanes: a power of two, at most 32");
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

/// The sum of `x` over the `kLanes` neighbouring lanes of a group, in each of them.
template <int kLanes>
__device__ inline float lane_sum(float x) {
  static_assert(kLanes > 0 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "kLanes: a power of two, at most 32");
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

/// a · b + c, component by component, with fused multiply-adds.
__device__ inline float4 fma4(float a, float4 b, float4 c) {
  return make_float4(fmaf(a, b.x, c.x), fmaf(a, b.y, c.y), fmaf(a, b.z, c.z), fmaf(a, b.w, c.w));
}

/// c + a · b summed over the four components, with fused multiply-adds in the
/// order x, y, z, w.
__device__ inline float dot4(float4 a, float4 b, float c) {
  return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, c))));
}

/// a · v, component by component.
__device__ inline float4 scale4(float a, float4 v) { return make_float4(a * v.x, a * v.y, a * v.z, a * v.w); }

/// Component k (0 … 3, a compile-time constant after unrolling) of v.
__device__ inline float component(float4 v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }

}  // namespace common::cuda
