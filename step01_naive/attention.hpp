/// \file step01_naive/attention.hpp
/// \brief step01_naive: standard attention with Eigen, materialising S and P.
#pragma once

#include "common/problem.hpp"
#include "common/step.hpp"

/// Step 1: standard attention, the baseline every later step must match.
namespace step01 {

/// Computes O = softmax(scale·QKᵀ)·V and L = logsumexp(scale·QKᵀ) for every
/// (batch, head), materialising the N_q × N_kv score matrix of one head at a
/// time. Throws common::InputError for invalid problems.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step01
