/// \file convert.cuh
/// \brief bf16/fp16 ↔ fp32 on the device, for steps that keep Q, K, V, P̃ and O in
/// 16 bits and compute in fp32: rounding (nearest, ties to even, as
/// common/precision.hpp does on the CPU), two values packed in one 32-bit
/// register (an mma operand), and four at a time to and from a float4.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace common::cuda {

/// `x` rounded to T (__nv_bfloat16 or __half; nearest, ties to even).
template <class T>
__device__ inline T round_to(float x) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "bf16 or fp16");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(x);
  } else {
    return __float2half_rn(x);
  }
}

/// `lo` and `hi` rounded to T in one 32-bit register, `lo` in the low half: the
/// order of two neighbouring columns in memory and in an mma fragment.
template <class T>
__device__ inline uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

/// Four neighbouring elements of T (8 bytes, 8-byte aligned) widened to a float4 (exact).
template <class T>
__device__ inline float4 load4(const T* p) {
  const uint2 bits = *reinterpret_cast<const uint2*>(p);
  const T* e = reinterpret_cast<const T*>(&bits);
  return make_float4(float(e[0]), float(e[1]), float(e[2]), float(e[3]));
}

/// `v` rounded to T and stored as four neighbouring elements (8 bytes, 8-byte aligned).
template <class T>
__device__ inline void store4(T* p, float4 v) {
  *reinterpret_cast<uint2*>(p) = make_uint2(pack2<T>(v.x, v.y), pack2<T>(v.z, v.w));
}

}  // namespace common::cuda
