/// \file step06_fa2/attention.hpp
/// \brief step06_fa2: FlashAttention-2 forward on the GPU, fp32.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 6: FlashAttention-2 — query tiles outside, K/V tiles inside, one write of O and L.
namespace step06 {

/// Computes O and L with FlashAttention-2 (Dao 2023, Algorithm 1) on the GPU:
/// one thread block per (query tile i, batch·head); the block keeps O_i, m_i,
/// l_i in registers while it sweeps every K_j, V_j tile, and writes O_i and
/// L_i = m_i + log l_i once. Causal tiles above the diagonal are skipped.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not in 32, 64, 96, 128, not
/// enough GPU memory) or NoGpuError.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step06
