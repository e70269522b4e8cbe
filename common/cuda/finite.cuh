/// \file finite.cuh
/// \brief Refusing NaN and infinity in inputs that already live on the GPU.
///
/// The programs check their inputs on the host (common::validate) before
/// uploading them. A caller that hands device memory to a step directly (Python
/// through DLPack) has nothing on the host to check: this is the same check, run
/// on the device, with the same one-line message.
#pragma once

#include "common/step.hpp"

namespace common::cuda {

/// Throws InputError with common::non_finite_message for the first NaN or
/// infinity in Q, K or V of `args` (checked in that order), whose elements are
/// of `args.precision`: float for fp32, `__nv_bfloat16` for bf16, `__half` for
/// fp16. Runs one small kernel per tensor on `args.stream` and waits for that
/// stream: a synchronisation, so callers that must stay asynchronous leave it out.
void require_finite_inputs(const DeviceArgs& args);

}  // namespace common::cuda
