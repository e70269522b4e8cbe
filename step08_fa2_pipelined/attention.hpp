/// \file step08_fa2_pipelined/attention.hpp
/// \brief step08_fa2_pipelined: FlashAttention-2 with a memory pipeline, fp32.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 8: step 7 with K_j, V_j double-buffered by cp.async and P̃_ij through shared memory.
namespace step08 {

/// Computes O and L with FlashAttention-2 as step 7, with the next K_j, V_j
/// tile copied by cp.async while the current one is used, and P̃_ij handed to
/// the lanes of its row through shared memory.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not in 32, 64, 96, 128, not
/// enough GPU memory) or NoGpuError.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step08
