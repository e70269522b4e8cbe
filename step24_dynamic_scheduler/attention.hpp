/// \file step24_dynamic_scheduler/attention.hpp
/// \brief step24_dynamic_scheduler: step 23 with causal tiles handed out longest first from an atomic counter (sm_90a).
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 24: step 23's persistent grid, its causal tiles handed out from a counter, d = 64, 96, 128 and 256.
namespace step24 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) as step 23, on one
/// block an SM that loops over the query tiles the scheduler gives it (static for full
/// attention, dynamic and longest first for causal). B_r = 192 at d = 64, 128 from d = 96
/// on; B_c = 128, 64 at d = 256. `result.extra` holds the kernel's resource report
/// (tiles, shared memory, registers, spill bytes). Throws InputError (d not 64, 96, 128 or
/// 256, fp32 asked for, not enough GPU memory) or NoGpuError (no GPU, or one that is not Hopper).
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step24
