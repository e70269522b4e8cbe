/// \file step05_cuda_registers/attention.hpp
/// \brief step05_cuda_registers: Algorithm 1 on the GPU with the per-iteration working set in registers.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

#ifndef STEP05_SPILL
/// 1 in spill.cu, which builds this step's kernel again capped at 32 registers a thread.
#define STEP05_SPILL 0
#endif

/// Step 5: step 4's kernel with S_ij, P̃_ij, O_i, m_i and l_i in registers.
namespace step05 {

/// Computes O and L with Algorithm 1 on the GPU, as step 4, but the warp that
/// owns a row keeps its S_ij, P̃_ij, O_i, m_i and l_i in registers (lane c:
/// columns c, c + 32, …); only Q_i, K_j and V_j are staged in shared memory.
/// O, l and m are still read from and written back to global memory on every
/// (j, i). Throws InputError (d not in 32, 64, 96, 128; too large for the
/// device) or NoGpuError.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step05

#if !STEP05_SPILL  // spill.cu declares these itself, by renaming the namespace above
/// The same kernel built by spill.cu with 32 registers a thread (its slices in
/// local memory), for the benchmark and the tests.
namespace step05_spill {

/// Computes O and L with the spilling build of step 5's kernel.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// The spilling build as a step ("step05_spill").
common::StepInfo describe();

}  // namespace step05_spill
#endif
