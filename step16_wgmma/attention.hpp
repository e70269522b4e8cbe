/// \file step16_wgmma/attention.hpp
/// \brief step16_wgmma: FlashAttention-2 on Hopper's wgmma (sm_90a), two warpgroups, B_r = B_c = 128.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 16: step 15 with S_ij and O_i on wgmma (operands in shared memory, P̃_ij in registers).
namespace step16 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) with
/// FlashAttention-2 on Hopper's warpgroup tensor-core instruction (wgmma), the tiles
/// brought by TMA, with B_r = 128 rows and B_c = 128 keys.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not 64 or 128, fp32 asked for,
/// not enough GPU memory) or NoGpuError (no GPU, or one that is not Hopper).
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step16
