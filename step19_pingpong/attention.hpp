/// \file step19_pingpong/attention.hpp
/// \brief step19_pingpong: step 18 with the two consumer warpgroups taking turns on the tensor cores (ping-pong, sm_90a).
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 19: step 18 with ping-pong: the consumer warpgroups take turns on named barriers.
namespace step19 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) as step 18, with
/// one warpgroup's softmax under the other warpgroup's products; B_r = B_c = 128.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not 64 or 128, fp32 asked for,
/// not enough GPU memory) or NoGpuError (no GPU, or one that is not Hopper).
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step19
