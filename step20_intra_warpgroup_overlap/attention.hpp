/// \file step20_intra_warpgroup_overlap/attention.hpp
/// \brief step20_intra_warpgroup_overlap: step 19 with the softmax under P̃V inside a warpgroup (sm_90a).
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 20: step 19 with S_ij's softmax run while P̃_i,j−1 V_j−1 is on the tensor cores, inside a warpgroup.
namespace step20 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) as step 19, with
/// each tile's softmax overlapped with wgmmas: its own warpgroup's P̃_i,j−1 V_j−1 and
/// the other warpgroup's products; B_r = B_c = 128.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not 64 or 128, fp32 asked for,
/// not enough GPU memory) or NoGpuError (no GPU, or one that is not Hopper).
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step20
