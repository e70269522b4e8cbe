/// \file reference.hpp
/// \brief The fp64 reference every step is checked against, and the tolerance rule.
///
/// Plain loops, independent of Eigen and of every step: if a step and the
/// reference agree, it is not because they share code.
#pragma once

#include <vector>

#include "common/problem.hpp"

namespace common {

/// O and L computed in double precision.
struct Reference {
  std::vector<double> o;    ///< (B, H, N_q, d)
  std::vector<double> lse;  ///< (B, H, N_q)
};

/// Standard attention in fp64: S = scale·QKᵀ (masked when causal), m = rowmax S,
/// l = Σ exp(S − m), O = exp(S − m)·V / l, L = m + log l.
Reference reference_attention(const Problem& problem);

/// The same standard attention computed in fp32 (plain loops, float
/// accumulators): the "fp32 baseline" whose error defines the tolerance.
Result standard_attention_fp32(const Problem& problem);

/// Maximum absolute errors of a result against the reference. NaN or a missing
/// element counts as an infinite error.
struct Errors {
  double max_err_o = 0;    ///< max |O - O_ref|
  double max_err_lse = 0;  ///< max |L - L_ref|
};

/// Max absolute errors of `result` against `ref`.
Errors max_errors(const Result& result, const Reference& ref);

/// The errors of fp32 standard attention on these inputs: the largest error among
/// three correct fp32 formulations that differ only in where they round — plain
/// (s = scale·(q·k), exp), Q scaled first (s = (scale·q)·k), and q·k accumulated
/// with fused multiply-adds followed by exp2 with log2(e) folded in (as GPU
/// kernels do). With large scores (|s| ~ 1e3) the error of O is set by how S is
/// rounded, which differs between correct implementations by a factor of 2–3 from
/// input to input; one formulation alone would make the 2× rule a coin toss there.
Errors baseline_errors(const Problem& problem, const Reference& ref);

/// FlashAttention-2's tolerance rule: a step passes when its max error is at most
/// twice the max error of fp32 standard attention (baseline_errors) on the same
/// inputs, plus 1e-6.
struct Tolerance {
  double o = 0;    ///< allowed max |O - O_ref|
  double lse = 0;  ///< allowed max |L - L_ref|
};

/// The floor added to the doubled baseline error.
inline constexpr double kToleranceFloor = 1e-6;

/// The tolerance for `problem`: computes the fp32 baseline and its errors.
Tolerance tolerance_for(const Problem& problem, const Reference& ref);

/// Everything `--check` and the tests need in one place.
struct Verdict {
  Errors errors;        ///< the step's errors
  Errors baseline;      ///< fp32 standard attention's errors
  Tolerance tolerance;  ///< 2 × baseline + floor
  bool passed = false;  ///< both errors within tolerance (and no NaN)
};

/// Compares `result` with the fp64 reference under the tolerance rule.
Verdict check_result(const Problem& problem, const Result& result);

}  // namespace common
