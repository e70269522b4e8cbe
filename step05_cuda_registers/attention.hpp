/// \file step05_cuda_registers/attention.hpp
/// \brief step05_cuda_registers: Algorithm 1 on the GPU with the per-iteration working set in registers.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 5: step 4's kernel with S_ij, P̃_ij, O_i, m_i and l_i in registers.
namespace step05 {

/// The head dimensions this step is compiled for (one kernel instantiation each).
inline const std::vector<int64_t> kHeadDims = {32, 64, 96, 128};

/// Computes O and L with Algorithm 1 on the GPU, as step 4, but each thread
/// keeps its fixed slice of S_ij, P̃_ij and O_i and its rows' m_i and l_i in
/// registers; only Q_i, K_j and V_j are staged in shared memory. O, l and m are
/// still read from and written back to global memory on every (j, i). With
/// `options.repeat` > 0 the kernel is also timed (`result.kernel_ms`). Throws
/// InputError (unsupported d, too large for the device) or NoGpuError.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// The same kernel compiled with its accumulator loops not unrolled, so the
/// slices are indexed at run time and live in local memory (a spill): the
/// benchmark runs it beside attention_forward to show what registers are worth.
common::Result attention_forward_local_memory(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

/// The local-memory variant as a step (for its tests and the benchmark).
common::StepInfo describe_local_memory();

}  // namespace step05
