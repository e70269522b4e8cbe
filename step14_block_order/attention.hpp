/// \file step14_block_order/attention.hpp
/// \brief step14_block_order: step 13 with the blocks' order chosen by the mask: causal query tiles longest first across heads.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 14: step 13 with the block order by mask: causal blocks longest first across heads, unmasked ones head by head.
namespace step14 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) with
/// FlashAttention-2 on the tensor cores as step 13, with B_r = 128 rows and
/// B_c = 128 keys at d ≤ 64, 64 at d = 96 and 128.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not in 32, 64, 96, 128, fp32
/// asked for, not enough GPU memory) or NoGpuError.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step14
