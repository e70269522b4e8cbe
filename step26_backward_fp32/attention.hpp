/// \file step26_backward_fp32/attention.hpp
/// \brief step26_backward_fp32: step 8's forward and FlashAttention-2's backward (Algorithm 2), fp32 CUDA.
#pragma once

#include <cstdint>
#include <vector>

#include "common/backward.hpp"
#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 26: step 8's forward and the backward pass in fp32 CUDA: one block per K/V tile, dQ by atomics.
namespace step26 {

/// Computes O and L with FlashAttention-2 as step 7, with the next K_j, V_j
/// tile copied by cp.async while the current one is used, and P̃_ij handed to
/// the lanes of its row through shared memory.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not in 32, 64, 96, 128, not
/// enough GPU memory) or NoGpuError.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// Enqueues the backward pass (backward.cu) on `args.stream`: D = rowsum(dO ∘ O), then
/// one block per K/V tile accumulating dK_j, dV_j and adding dQ_i's terms with
/// atomicAdd (the only way here: a session asked for `deterministic` is refused).
/// `args.workspace` holds D: backward_workspace_bytes(shape) bytes.
void launch_backward(const common::DeviceBackwardArgs& args);

/// The backward kernels' tiles and the compiler's resources for head dimension d.
common::Figures backward_resources(int64_t head_dim);

/// Device bytes launch_backward needs beyond its tensors: D, 4·B·H·N_q.
int64_t backward_workspace_bytes(const common::Shape& shape, bool deterministic);

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step26
