/// \file step23_persistent/attention.hpp
/// \brief step23_persistent: step 22 on a persistent grid, one block an SM looping over every G-th query tile (sm_90a).
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 23: step 22's kernel on a persistent grid with a static tile scheduler, d = 64, 96, 128 and 256.
namespace step23 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) as step 22, on one
/// block an SM that loops over the query tiles a static scheduler gives it (b, b + G,
/// b + 2G, … in step 21's block order). B_r = 192 at d = 64, 128 from d = 96
/// on; B_c = 128, 64 at d = 256. `result.extra` holds the kernel's resource report
/// (tiles, shared memory, registers, spill bytes). Throws InputError (d not 64, 96, 128 or
/// 256, fp32 asked for, not enough GPU memory) or NoGpuError (no GPU, or one that is not Hopper).
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step23
