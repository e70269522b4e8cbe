/// \file reference.hpp
/// \brief The fp64 reference every step is checked against, and the tolerance rule.
///
/// Plain loops, independent of Eigen and of every step: if a step and the
/// reference agree, it is not because they share code.
#pragma once

#include <string>
#include <vector>

#include "common/precision.hpp"
#include "common/problem.hpp"

namespace common {

/// O and L computed in double precision.
struct Reference {
  std::vector<double> o;  ///< (B, H, N_q, d)
  std::vector<double> lse;  ///< (B, H, N_q)
  double max_abs_s = 0;  ///< max |S| over the scores the queries see (the tolerance's floor)
  double max_abs_v = 0;  ///< max |V| (the tolerance's floor)
};

/// Standard attention in fp64: S = scale·QKᵀ (masked when causal), m = rowmax S,
/// l = Σ exp(S − m), O = exp(S − m)·V / l, L = m + log l.
Reference reference_attention(const Problem& problem);

/// The same standard attention computed in fp32 (plain loops, float
/// accumulators): the "fp32 baseline" whose error defines the tolerance.
Result standard_attention_fp32(const Problem& problem);

/// Standard attention in a lower precision, as FlashAttention-2's tests compute
/// their baseline: Q, K and V rounded to `precision`, S = scale·QKᵀ and the
/// softmax in fp32, P rounded to `precision` before P·V, P·V accumulated in fp32,
/// O rounded to `precision`; L in fp32. With Precision::fp32 it is
/// standard_attention_fp32. Throws InputError when an input does not fit.
Result standard_attention_in(const Problem& problem, Precision precision);

/// Maximum absolute errors of a result against the reference. NaN or a missing
/// element counts as an infinite error.
struct Errors {
  double max_err_o = 0;  ///< max |O - O_ref|
  double max_err_lse = 0;  ///< max |L - L_ref|
};

/// max |got − want| over the elements; a NaN, or a size that differs, counts as an
/// infinite error. The one comparison behind every error the checks report.
double max_abs_error(const std::vector<float>& got, const std::vector<double>& want);

/// Max absolute errors of `result` against `ref`.
Errors max_errors(const Result& result, const Reference& ref);

/// The errors of fp32 standard attention on these inputs: the largest error among
/// three correct fp32 formulations that differ only in where they round — plain
/// (s = scale·(q·k), exp), Q scaled first (s = (scale·q)·k), and q·k accumulated
/// with fused multiply-adds followed by exp2 with log2(e) folded in (as GPU
/// kernels do). With large scores (|s| ~ 1e3) the error of O is set by how S is
/// rounded, which differs between correct implementations by a factor of 2–3 from
/// input to input; one formulation alone would make the 2× rule a coin toss there.
///
/// For bf16 and fp16 it is the error of standard_attention_in(problem, precision)
/// instead: there the rounding of P and O (relative steps of 2^-8 and 2^-11) is
/// hundreds of times larger than any difference between fp32 formulations.
/// `problem` must already hold inputs rounded to `precision` (rounded_inputs).
Errors baseline_errors(const Problem& problem, const Reference& ref, Precision precision = Precision::fp32);

/// FlashAttention-2's tolerance rule: a step passes when its max error is at most
/// twice the max error of standard attention in the step's precision
/// (baseline_errors) on the same inputs, plus a floor (tolerance_floor_o,
/// tolerance_floor_lse): 1e-6, or half of what one unavoidable rounding can
/// cost when that is more.
struct Tolerance {
  double o = 0;  ///< allowed max |O - O_ref|
  double lse = 0;  ///< allowed max |L - L_ref|
};

/// The floor added to the doubled baseline error.
inline constexpr double kToleranceFloor = 1e-6;

/// The floor added to the doubled baseline error of O: the largest of
/// kToleranceFloor; u_fp32/2 · max |S| · max |V|; and for bf16 and fp16,
/// u/2 · max |O_ref| (u = 2^-8, 2^-11 the unit roundoff).
///
/// Each is half of what a rounding that no implementation in that precision can
/// avoid may cost. Rounding O to 16 bits moves it by up to u · |O|. Storing the
/// scores in fp32 moves each s_j by up to u_fp32 · |s_j|; where the two largest
/// scores of a row nearly tie (P_1 = P_2 = 1/2), their difference moves by up to
/// 2 u_fp32 · max |S|, and the row of O, (v_1 + v_2)/2 + (P_1 − P_2)(v_1 − v_2)/2,
/// by up to u_fp32 · max |S| · max |V|. The 2× rule compares two maxima of random
/// rounding errors, and where a few values decide them the baseline's can be
/// small by luck: over a few hundred 16-bit outputs (N_q = 3, d = 32), or with
/// scores of size 10³, where the error of O comes from the few rows whose two
/// largest scores nearly tie (on 12 of 3000 such problems step 1's error was more
/// than twice the baseline's, up to 6.3 times; none of 4000 fails with this
/// term). With scores of order 1 the fp32 term is below 1e-6 and the rule is as
/// strict as ever.
double tolerance_floor_o(const Reference& ref, Precision precision);

/// The floor added to the doubled baseline error of L (fp32 in every
/// precision): the larger of kToleranceFloor and u_fp32/2 · max |S|, half of
/// what storing the scores in fp32 may cost L = m + log Σ exp(s − m) at most
/// (δL = Σ_j P_j δs_j).
double tolerance_floor_lse(const Reference& ref);

/// The rule itself, from the baseline's errors already computed: twice them, plus the floors.
Tolerance tolerance_from(const Errors& baseline, const Reference& ref, Precision precision);

/// The tolerance for `problem`: computes the baseline in `precision` and its errors.
Tolerance tolerance_for(const Problem& problem, const Reference& ref, Precision precision = Precision::fp32);

/// Everything `--check` and the tests need in one place.
struct Verdict {
  Errors errors;  ///< the step's errors
  Errors baseline;  ///< the errors of standard attention in the step's precision
  Tolerance tolerance;  ///< 2 × baseline + floor
  /// True only when every output is finite, the tolerance is finite and both
  /// errors are within it. A check never passes a NaN or an infinity.
  bool passed = false;
  std::string failure;  ///< why it failed, in one line (empty when passed)
};

/// Compares `result` with the fp64 reference under the tolerance rule. The
/// reference is finite for any finite inputs, so an output that is NaN or
/// infinite fails; so does any check whose tolerance is not finite (the
/// baseline itself overflowed: these inputs are beyond what fp32 can judge).
///
/// A step that computes in bf16 or fp16 is judged on the inputs it computed on:
/// the reference and the baseline both start from Q, K and V rounded to
/// `precision` (rounded_inputs), as FlashAttention-2's tests start from bf16
/// tensors. The rounding of the inputs is the caller's choice of precision, not
/// an error of the step.
Verdict check_result(const Problem& problem, const Result& result, Precision precision = Precision::fp32);

}  // namespace common
