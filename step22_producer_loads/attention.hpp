/// \file step22_producer_loads/attention.hpp
/// \brief step22_producer_loads: step 21 with every load issued by the producer, the roles split at the start (sm_90a).
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 22: step 21's kernel with the producer issuing every load, d = 64, 96, 128 and 256.
namespace step22 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) as step 21, one block per
/// query tile, its producer thread issuing Q_i and every K_j, V_j. B_r = 192 at d = 64, 128
/// from d = 96 on; B_c = 128, 64 at d = 256. `result.extra` holds the kernel's resource report
/// (tiles, shared memory, registers, spill bytes). Throws InputError (d not 64, 96, 128 or
/// 256, fp32 asked for, not enough GPU memory) or NoGpuError (no GPU, or one that is not Hopper).
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step22
