/// \file step25_backward_cpu/attention.hpp
/// \brief step25_backward_cpu: step 2's forward and FlashAttention-2's backward (Algorithm 2) on the CPU.
#pragma once

#include <cstdint>

#include "common/backward.hpp"
#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 25: step 2's forward (FlashAttention-1, Algorithm 1) and the backward pass
/// (FlashAttention-2, Algorithm 2), as the papers write them.
namespace step25 {

/// The default on-chip budget M: 2^17 floats = 512 KiB, half of a 1 MiB per-core
/// L2 cache, so K_j, V_j, Q_i, O_i and S_ij stay in cache while a tile is worked on.
inline constexpr int64_t kDefaultSramFloats = int64_t{1} << 17;

/// Computes O and L with Algorithm 1: K/V tiles in the outer loop, Q tiles in the
/// inner loop, O, l and m in full-size "HBM" arrays read and written back on
/// every (j, i). Tiles come from `options.sram_floats` (M; 0 = the default).
/// `result.traffic` counts every byte moved between "HBM" and the tiles.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// Computes dQ, dK and dV with Algorithm 2 (backward.cpp): K/V tiles in the outer
/// loop with dK_j and dV_j on chip, Q tiles in the inner loop, P_ij recomputed from
/// L, dQ read and written back in "HBM" on every (j, i). Tiles come from
/// `options.sram_floats` (M; 0 = the default) by common::algorithm2_tiles.
/// `gradients.traffic` counts every byte moved between "HBM" and the tiles.
common::Gradients attention_backward(const common::Problem& problem, const common::BackwardInputs& inputs,
                                     const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step25
