/// \file step13_scale_in_exp2/attention.hpp
/// \brief step13_scale_in_exp2: step 12 with the softmax's scale inside the exponential: one fma and one ex2.approx.ftz an entry of S_ij.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 13: step 12 with the scale applied inside ex2.approx.ftz instead of to S_ij first.
namespace step13 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) with
/// FlashAttention-2 on the tensor cores as step 12, with B_r = 128 rows and
/// B_c = 128 keys at d ≤ 64, 64 at d = 96 and 128.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not in 32, 64, 96, 128, fp32
/// asked for, not enough GPU memory) or NoGpuError.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step13
