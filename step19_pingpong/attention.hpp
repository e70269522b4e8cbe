/// \file step19_pingpong/attention.hpp
/// \brief step19_pingpong: step 15 with the softmax under the tensor cores' products, inside a warpgroup and between two (sm_90a).
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 16: step 15 with P̃V issued behind the next S and run under its softmax, and the warpgroups taking turns (ping-pong).
namespace step19 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) as step 15, with
/// each tile's softmax overlapped with wgmmas: its own warpgroup's P̃_i,j−1 V_j−1 and
/// the other warpgroup's products; B_r = B_c = 128.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not 64 or 128, fp32 asked for,
/// not enough GPU memory) or NoGpuError (no GPU, or one that is not Hopper).
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step19
