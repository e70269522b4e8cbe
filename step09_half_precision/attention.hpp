/// \file step09_half_precision/attention.hpp
/// \brief step09_half_precision: FlashAttention-2 in bf16 and fp16, fp32 arithmetic.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 9: step 8 with Q, K, V, P̃_ij and O in bf16 or fp16, arithmetic in fp32.
namespace step09 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) with
/// FlashAttention-2 as step 8, each 16-bit value widened to fp32 when it is read.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not in 32, 64, 96, 128, fp32
/// asked for, not enough GPU memory) or NoGpuError.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step09
