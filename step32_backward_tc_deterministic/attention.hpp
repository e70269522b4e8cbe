/// \file step32_backward_tc_deterministic/attention.hpp
/// \brief step32_backward_tc_deterministic: step 14's forward and FlashAttention-2's backward (Algorithm 2) on the tensor cores, bf16 and fp16.
#pragma once

#include <cstdint>
#include <vector>

#include "common/backward.hpp"
#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 32: step 14's forward and the backward pass on the tensor cores in bf16 and fp16, dQ by atomics or deterministic.
namespace step32 {

/// Computes O (in bf16 or fp16, `options.precision`) and L (fp32) with
/// FlashAttention-2 on the tensor cores as step 13, with B_r = 128 rows and
/// B_c = 128 keys at d ≤ 64, 64 at d = 96 and 128.
/// `result.extra` holds the kernel's resource report (tiles, shared memory,
/// registers, spill bytes). Throws InputError (d not in 32, 64, 96, 128, fp32
/// asked for, not enough GPU memory) or NoGpuError.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// Computes dQ, dK, dV (in `options.precision`, bf16 or fp16, returned as float32) from the
/// forward's O and L and the upstream gradient dO: the backward session of describe(), run
/// once. Throws InputError (as attention_forward, and for O, L or dO of the wrong length or
/// not finite) or NoGpuError.
common::Gradients attention_backward(const common::Problem& problem, const common::BackwardInputs& inputs,
                                     const common::Options& options = {});

/// Enqueues the backward pass (backward.cu) on `args.stream`: D = rowsum(dO ∘ O), then
/// one block per K/V tile accumulating dK_j, dV_j on the tensor cores and adding dQ_i's
/// terms with atomicAdd into an fp32 accumulator that a last kernel rounds into dQ, or
/// with `args.deterministic` a second kernel that sums dQ_i in order.
/// `args.workspace` holds D and the accumulator: backward_workspace_bytes(shape) bytes.
void launch_backward(const common::DeviceBackwardArgs& args);

/// The backward kernels' tiles and the compiler's resources for head dimension d.
common::Figures backward_resources(int64_t head_dim);

/// Device bytes launch_backward needs beyond its tensors: D, 4·B·H·N_q, and with atomics
/// the fp32 accumulator of dQ, 4·B·H·N_q·d.
int64_t backward_workspace_bytes(const common::Shape& shape, bool deterministic);

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step32
