/// \file step21_tiles_by_head_dim/attention.hpp
/// \brief step21_tiles_by_head_dim: step 20 with the block's shape by d: three consumer warpgroups (B_r = 192) at d = 64, d = 96 and 256 too (sm_90a).
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 21: step 20 with B_r = 192 (three consumer warpgroups of 160 registers) at d = 64, and d = 96 and 256.
namespace step21 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) as step 20, with
/// B_r = 192 (three consumer warpgroups) at d = 64 and 128 (two) from d = 96 on; B_c = 128,
/// 64 at d = 256. `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not 64, 96, 128 or 256, fp32 asked for,
/// not enough GPU memory) or NoGpuError (no GPU, or one that is not Hopper).
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step21
