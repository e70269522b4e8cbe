/// \file step18_issue_order/attention.hpp
/// \brief step18_issue_order: step 17 with S_ij and P̃_i,j−1 V_j−1 issued back to back, one wait a tile (sm_90a).
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 18: step 17 with S_ij and P̃_i,j−1 V_j−1 queued back to back and waited for once.
namespace step18 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) as step 17, with
/// S_ij and the previous tile's P̃_i,j−1 V_j−1 queued together and one wait for both;
/// B_r = B_c = 128.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not 64 or 128, fp32 asked for,
/// not enough GPU memory) or NoGpuError (no GPU, or one that is not Hopper).
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step18
