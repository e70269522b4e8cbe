/// \file step02_tiled_cpu/attention.hpp
/// \brief step02_tiled_cpu: FlashAttention-1 Algorithm 1 on the CPU, with HBM traffic counted.
#pragma once

#include <cstdint>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 2: FlashAttention-1, Algorithm 1, as the paper writes it.
namespace step02 {

/// The default on-chip budget M: 2^17 floats = 512 KiB, half of a 1 MiB per-core
/// L2 cache, so K_j, V_j, Q_i, O_i and S_ij stay in cache while a tile is worked on.
inline constexpr int64_t kDefaultSramFloats = int64_t{1} << 17;

/// Computes O and L with Algorithm 1: K/V tiles in the outer loop, Q tiles in the
/// inner loop, O, l and m in full-size "HBM" arrays read and written back on
/// every (j, i). Tiles come from `options.sram_floats` (M; 0 = the default).
/// `result.traffic` counts every byte moved between "HBM" and the tiles.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step02
