/// \file exp2.cuh
/// \brief 2^x in one instruction: `ex2.approx.ftz.f32` (PTX ISA, "Floating Point
/// Instructions: ex2"), the exponential of the base-2 softmax steps.
///
/// `exp2f(x)` compiles to `ex2.approx.f32` without `.ftz`, which keeps subnormal
/// results: the machine code then scales x into range before the `MUFU.EX2` and back
/// after it, three more instructions around each exponential. With `.ftz` a result
/// below 2^-126 is 0 and `MUFU.EX2` stands alone. In the softmax that changes nothing:
/// P̃_ij = 2^(x − m) with x ≤ m, and a term below 2^-126 is lost in any fp32 sum
/// that already holds the row's largest term, 1.
#pragma once

namespace common::cuda {

/// log2(e): e^x = 2^(x · log2 e), so scale · log2 e turns a score into an exponent of 2.
constexpr float kLog2e = 1.4426950408889634f;
/// ln 2: an m_i kept in base 2 is m_i · ln 2 in base e, the base of L.
constexpr float kLn2 = 0.6931471805599453f;

/// 2^x, relative error about 2^-22; 0 for x below −126 (and for −∞), +∞ for x ≥ 128.
__device__ inline float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace common::cuda
