/// \file step04_cuda_smem/attention.hpp
/// \brief step04_cuda_smem: FlashAttention-1 Algorithm 1 on a real GPU, working set in shared memory.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 4: the kernel of steps 2 and 3 on a CUDA GPU.
namespace step04 {

/// Computes O and L with Algorithm 1 on the GPU: one thread block per (batch,
/// head); K/V tiles in the outer loop, Q tiles in the inner loop; Q_i, K_j, V_j,
/// S_ij, O_i, m_i and l_i staged in shared memory; O, l and m read from and
/// written back to global memory on every (j, i). Throws InputError (d not in
/// 32, 64, 96, 128; too large for the device) or NoGpuError.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step04
