/// \file step15_tma/attention.hpp
/// \brief step15_tma: step 14's kernel with its tiles copied by Hopper's TMA (sm_90a), completion on mbarriers.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 15: step 14 with the copies of Q_i, K_j, V_j by the tensor memory accelerator, 128-byte swizzled.
namespace step15 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) with step 14's
/// kernel, its tiles brought by the copy engine (TMA): B_r = 128, B_c = 128 at d = 64
/// and 64 at d = 128.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not 64 or 128, fp32 asked for,
/// not enough GPU memory) or NoGpuError (no GPU, or one that is not Hopper).
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step15
