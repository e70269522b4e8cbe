/// \file step07_fa2_register_tiles/attention.hpp
/// \brief step07_fa2_register_tiles: FlashAttention-2 with register tiles, fp32.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 7: step 6 with register tiles: each value a thread loads feeds many FMAs.
namespace step07 {

/// Computes O and L with FlashAttention-2 as step 6, but each thread owns a
/// 4-row × B_c/8-column tile of S_ij and a 4-row × d/8-column tile of O_i, so
/// every float4 it reads from shared memory feeds several FMAs.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not in 32, 64, 96, 128, not
/// enough GPU memory) or NoGpuError.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step07
