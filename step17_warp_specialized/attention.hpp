/// \file step17_warp_specialized/attention.hpp
/// \brief step17_warp_specialized: a producer warpgroup copies (TMA), two consumer warpgroups compute (wgmma), sm_90a.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 17: step 16 with warp specialisation: producer and consumer warpgroups, empty barriers, setmaxnreg.
namespace step17 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) as step 16, with a
/// producer warpgroup that issues the copies and two consumer warpgroups that
/// compute, B_r = B_c = 128.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not 64 or 128, fp32 asked for,
/// not enough GPU memory) or NoGpuError (no GPU, or one that is not Hopper).
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step17
