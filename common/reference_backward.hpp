/// \file reference_backward.hpp
/// \brief The fp64 reference gradients every backward step is checked against, and their tolerance rule.
///
/// Plain loops, independent of Eigen and of every step, one query row at a
/// time: S_i, P_i = softmax(S_i), dP_i = dO_i Vᵀ, D_i = rowsum(P_i ∘ dP_i),
/// dS_i = P_i ∘ (dP_i − D_i), dQ_i = scale · dS_i K, and dV, dK accumulated
/// over the rows. The reference recomputes the forward from Q, K and V itself:
/// it never sees a step's O or L.
#pragma once

#include <string>
#include <vector>

#include "common/backward.hpp"
#include "common/precision.hpp"
#include "common/problem.hpp"

namespace common {

/// dQ, dK and dV computed in double precision, with what the tolerance's floor needs.
struct ReferenceGradients {
  std::vector<double> dq;  ///< (B, H, N_q, d)
  std::vector<double> dk;  ///< (B, H, N_kv, d)
  std::vector<double> dv;  ///< (B, H, N_kv, d)
  double max_abs_s = 0;  ///< max |S| over the scores the queries see
  /// max over the visible scores of |scale|·Σ_c |Q_ic K_jc|: what bounds the rounding of
  /// a score computed as a dot product in any order (at least max |S|)
  double max_abs_s_terms = 0;
  /// The largest sum of the magnitudes of the terms behind one element of dQ,
  /// dK and dV: max over (i, c) of |scale|·Σ_j |dS_ij||K_jc|, over (j, c) of
  /// |scale|·Σ_i |dS_ij||Q_ic| and Σ_i P_ij|dO_ic| (the tolerance's floor).
  double magnitude_dq = 0;
  double magnitude_dk = 0;  ///< see magnitude_dq
  double magnitude_dv = 0;  ///< see magnitude_dq
};

/// The gradients of standard attention in fp64, for the upstream gradient `d_o`.
ReferenceGradients reference_backward(const Problem& problem, const std::vector<float>& d_o);

/// Standard attention's gradients computed in `precision`, the baseline of the
/// tolerance rule, as a framework's autograd computes them: in fp32 with float
/// accumulators; in bf16 or fp16 (inputs and dO already rounded) with P, dP and
/// dS rounded to `precision` before each product, fp32 accumulation, and dQ, dK,
/// dV rounded at the end.
Gradients standard_backward_in(const Problem& problem, const std::vector<float>& d_o, Precision precision);

/// Maximum absolute errors of dQ, dK and dV. NaN or a missing element counts as infinite.
struct GradientErrors {
  double dq = 0;  ///< max |dQ − dQ_ref|
  double dk = 0;  ///< max |dK − dK_ref|
  double dv = 0;  ///< max |dV − dV_ref|
};

/// Max absolute errors of `gradients` against `ref`.
GradientErrors max_errors(const Gradients& gradients, const ReferenceGradients& ref);

/// The errors of standard attention's gradients in `precision` on these inputs.
/// In fp32 the largest among four formulations that differ only in where they
/// round: the forward's three (baseline_errors: plain, Q scaled first, fma and
/// exp2) and P recomputed as exp(S' − L), as every FlashAttention backward does:
/// L from the scores rounded one way (a forward's), S' rounded another (a backward's
/// own recomputation). With scores of size 10³ the two roundings of a score differ by
/// far more than u·|s|, because a dot product's rounding grows with Σ|q_c k_c|, and
/// every P_ij moves with them. In bf16 and fp16 the larger of two: standard_backward_in's
/// (autograd's, D_i = Σ_j P_ij dP_ij) and FlashAttention's (P_ij from L_i and dP_ij in fp32,
/// D_i = dO_i · O_i with O_i rounded to 16 bits as a forward returns it), which differ most
/// at scores of size 10³, where dP_ij − D_i cancels. With `o`, the O the step's backward was
/// given (its own forward's), also FlashAttention's formulation with D_i = dO_i · O_i of that
/// O: a 16-bit forward's O is allowed twice standard attention's error, and where dP_ij − D_i
/// cancels that error is D_i's, which no backward can undo. `problem` and `d_o` must already
/// be rounded to `precision`.
GradientErrors baseline_gradient_errors(const Problem& problem, const std::vector<float>& d_o,
                                        const ReferenceGradients& ref, Precision precision,
                                        const std::vector<float>* o = nullptr);

/// The allowed max error of each gradient.
using GradientTolerance = GradientErrors;

/// FlashAttention-2's rule for gradients: a step passes when its max error on
/// each of dQ, dK and dV is at most twice that of standard attention's gradients
/// in the same precision on the same inputs, plus a floor: the largest of
/// kToleranceFloor; u_fp32/2 · max_abs_s_terms · the gradient's magnitude; and in
/// bf16 and fp16 u/2 · max |dX_ref| (one rounding of the output). The second term is
/// half of what computing the scores in fp32 may cost: a score's rounding error in a
/// dot product of d terms is bounded by u·Σ_c|scale·Q_ic K_jc| (up to a factor that
/// grows with d), it moves P_ij by as much relative to P_ij, and with it each sum
/// behind a gradient element. A backward recomputes S_ij in an order of its own, so
/// its P_ij and the forward's L_i disagree by that much, as standard attention's never
/// do. With scores of order 1 this term is below 1e-6 and the rule is as strict as
/// ever; with scores of size 10³ it is what keeps the 2× rule from being a coin toss.
GradientTolerance gradient_tolerance_from(const GradientErrors& baseline, const ReferenceGradients& ref,
                                          Precision precision);

/// Everything `--check --backward` and the gradient tests need in one place.
struct GradientVerdict {
  GradientErrors errors;  ///< the step's errors
  GradientErrors baseline;  ///< the errors of standard attention's gradients in the step's precision
  GradientTolerance tolerance;  ///< 2 × baseline + floor
  /// True only when every gradient is finite, the tolerance is finite and each
  /// error is within it.
  bool passed = false;
  std::string failure;  ///< why it failed, in one line (empty when passed)
};

/// Compares `gradients` with the fp64 reference under the rule above. A step
/// that computes in bf16 or fp16 is judged on the inputs it computed on: Q, K, V
/// and dO rounded to `precision`. `o`: the O its backward was given (see baseline_gradient_errors).
GradientVerdict check_gradients(const Problem& problem, const std::vector<float>& d_o, const Gradients& gradients,
                                Precision precision = Precision::fp32, const std::vector<float>* o = nullptr);

}  // namespace common
