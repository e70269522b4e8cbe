/// \file step12_register_budget/attention.hpp
/// \brief step12_register_budget: FlashAttention-2 on the tensor cores, the registers spent on the tiles: twice the keys a tile, m_i and l_i in shared memory.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 12: step 11 with B_c doubled (128 at d ≤ 64, 64 at d = 96 and 128) and m_i, l_i in shared memory.
namespace step12 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) with
/// FlashAttention-2 on the tensor cores as step 11, with B_r = 128 rows and
/// B_c = 128 keys at d ≤ 64, 64 at d = 96 and 128.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not in 32, 64, 96, 128, fp32
/// asked for, not enough GPU memory) or NoGpuError.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step12
