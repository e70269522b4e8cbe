/// \file warp.cuh
/// \brief Small device helpers the CUDA steps share: float4 arithmetic. (Each step
/// writes its own warp reductions, so that the shuffles are on its page.)
#pragma once

namespace common::cuda {

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
