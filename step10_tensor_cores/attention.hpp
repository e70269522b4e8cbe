/// \file step10_tensor_cores/attention.hpp
/// \brief step10_tensor_cores: FlashAttention-2 on the tensor cores (mma.sync), bf16 and fp16.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 10: step 9 with S_ij = Q_i K_jᵀ and P̃_ij V_j on the tensor cores (mma.sync.m16n8k16).
namespace step10 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) with
/// FlashAttention-2 as step 9, both matrix products by warp-wide mma.sync with
/// fp32 accumulators, operands read from shared memory by ldmatrix.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not in 32, 64, 96, 128, fp32
/// asked for, not enough GPU memory) or NoGpuError.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step10
