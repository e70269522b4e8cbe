/// \file step11_feeding_tensor_cores/attention.hpp
/// \brief step11_feeding_tensor_cores: FlashAttention-2 on the tensor cores, P̃_ij in registers, 32 rows a warp.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 11: step 10 with P̃_ij kept in registers, two 16-row mma tiles per warp and the softmax in base 2.
namespace step11 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) with
/// FlashAttention-2 on the tensor cores as step 10, P̃_ij handed from one mma to
/// the next in registers, B_r = 128 rows (32 a warp).
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not in 32, 64, 96, 128, fp32
/// asked for, not enough GPU memory) or NoGpuError.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step11
