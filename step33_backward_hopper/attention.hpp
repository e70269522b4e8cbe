/// \file step33_backward_hopper/attention.hpp
/// \brief step33_backward_hopper: step 24's forward and the backward pass on Hopper: wgmma, TMA, warpgroups with roles (sm_90a).
#pragma once

#include <cstdint>
#include <vector>

#include "common/backward.hpp"
#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 33: step 24's forward and the backward pass on Hopper's wgmma, bf16 and fp16, dQ by TMA reductions or deterministic.
namespace step33 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) as step 24, on one
/// block an SM that loops over the query tiles the scheduler gives it. B_r = 192 at
/// d = 64, 128 from d = 96 on; B_c = 128. `result.extra` holds the kernel's resource
/// report. Throws InputError (d not 64, 96 or 128, fp32 asked for, not enough GPU
/// memory) or NoGpuError (no GPU, or one that is not Hopper).
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// Computes dQ, dK, dV (in `options.precision`, bf16 or fp16, returned as float32) from the
/// forward's O and L and the upstream gradient dO: the backward session of describe(), run
/// once. Throws InputError (as attention_forward, and for O, L or dO of the wrong length or
/// not finite) or NoGpuError.
common::Gradients attention_backward(const common::Problem& problem, const common::BackwardInputs& inputs,
                                     const common::Options& options = {});

/// Enqueues the backward pass (backward.cu) on `args.stream`: D = rowsum(dO ∘ O) and L padded
/// by query tile, then one block per K/V tile (a producer warpgroup, two consumer
/// warpgroups) accumulating dK_j, dV_j with wgmma and adding dQ_i's terms into an fp32
/// accumulator by TMA reductions (with `args.deterministic`, K/V tile by K/V tile in order),
/// then a last kernel that rounds it into dQ. `args.workspace`: backward_workspace_bytes.
void launch_backward(const common::DeviceBackwardArgs& args);

/// The backward kernel's tiles and the compiler's resources for head dimension d.
common::Figures backward_resources(int64_t head_dim);

/// Device bytes launch_backward needs beyond its tensors: L and D padded to whole query
/// tiles, dQ's fp32 accumulator, and (deterministic) a counter per query tile.
int64_t backward_workspace_bytes(const common::Shape& shape, bool deterministic);

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step33
