/// \file reference_backward.cpp
/// \brief fp64 reference gradients, the baselines in each precision, and the gradient tolerance rule.
#include "common/reference_backward.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

#include "common/reference.hpp"

namespace common {

namespace {

// Where a float implementation rounds: the forward's three formulations, and P
// recomputed from the row's log-sum-exp as every FlashAttention backward does.
enum class Rounding {
  kPlain,  // s = scale · (q·k), p = exp(s − m) / l
  kPrescaledQ,  // s = (scale · q)·k: Q scaled first
  kFmaExp2,  // q·k with fused multiply-adds, p = 2^(s·log2e − m·log2e) / l
  // FlashAttention's own formulation: L = m + log l and O from the plain scores s, as a
  // forward pass saved them; P = exp(s' − L) with s' recomputed with Q scaled first, as a
  // backward pass recomputes S_ij in its own order; D = dO · O instead of Σ_j P_ij dP_ij.
  // At |s| ~ 1e3 the two roundings of S differ by more than u·|s| (a dot product's rounding
  // grows with Σ|q_c k_c|, not with |s|), and every P_ij moves with them; and D = dO · O
  // cancels dP_ij − D_i only up to rounding where standard attention's D cancels exactly
  // (one visible key: dS = 0 in exact arithmetic).
  kFromLse,
};

// Standard attention's gradients with every intermediate in T (double for the
// reference, float for the baselines), one (b, h, query row) at a time. With
// `low` bf16 or fp16 (T = float, inputs already rounded): P, dP and dS rounded
// to `low` before each product, as autograd in that precision does, and dQ,
// dK, dV rounded at the end. `ref`, when given, also receives max |S| and the
// magnitudes of the floor.
template <class T>
void standard_backward(const Problem& p, const std::vector<float>& d_o, std::vector<T>& dq, std::vector<T>& dk,
                       std::vector<T>& dv, Rounding rounding = Rounding::kPlain, Precision low = Precision::fp32,
                       ReferenceGradients* ref = nullptr, const std::vector<float>* o_given = nullptr) {
  const Shape& s = p.shape;
  const int64_t d = s.head_dim;
  const T scale = T(p.scale);
  const T log2e = T(1.4426950408889634);
  const auto lowered = [low](T x) { return low == Precision::fp32 ? x : T(round_to(low, float(x))); };
  dq.assign(static_cast<size_t>(s.q_elements()), T(0));
  dk.assign(static_cast<size_t>(s.kv_elements()), T(0));
  dv.assign(static_cast<size_t>(s.kv_elements()), T(0));
  std::vector<T> P(static_cast<size_t>(s.seq_kv)), dS(static_cast<size_t>(s.seq_kv)), o_row(static_cast<size_t>(d));
  std::vector<double> magnitude_dk, magnitude_dv;  // per element of dK, dV (reference only)
  if (ref) {
    magnitude_dk.assign(dk.size(), 0.0);
    magnitude_dv.assign(dv.size(), 0.0);
  }
  for (int64_t bh = 0; bh < s.batch_heads(); ++bh) {
    const float* q = p.q.data() + bh * s.seq_q * d;
    const float* k = p.k.data() + bh * s.seq_kv * d;
    const float* v = p.v.data() + bh * s.seq_kv * d;
    const float* g = d_o.data() + bh * s.seq_q * d;
    T* dk_bh = dk.data() + bh * s.seq_kv * d;
    T* dv_bh = dv.data() + bh * s.seq_kv * d;
    for (int64_t i = 0; i < s.seq_q; ++i) {
      const int64_t visible = p.causal ? std::min(i + 1, s.seq_kv) : s.seq_kv;  // query i sees keys 0..i
      // S_i and P_i = softmax(S_i), as the forward computes them.
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < visible; ++j) {
        T dot = 0;
        if (rounding == Rounding::kFromLse) {
          T again = 0;
          for (int64_t c = 0; c < d; ++c) again += (scale * T(q[i * d + c])) * T(k[j * d + c]);
          dS[j] = again;  // s', for P below; the plain s decides m and l
          for (int64_t c = 0; c < d; ++c) dot += T(q[i * d + c]) * T(k[j * d + c]);
          P[j] = scale * dot;
        } else if (rounding == Rounding::kPrescaledQ) {
          for (int64_t c = 0; c < d; ++c) dot += (scale * T(q[i * d + c])) * T(k[j * d + c]);
          P[j] = dot;
        } else if (rounding == Rounding::kFmaExp2) {
          for (int64_t c = 0; c < d; ++c) dot = std::fma(T(q[i * d + c]), T(k[j * d + c]), dot);
          P[j] = scale * dot;
        } else {
          for (int64_t c = 0; c < d; ++c) dot += T(q[i * d + c]) * T(k[j * d + c]);
          P[j] = scale * dot;
        }
        m = std::max(m, P[j]);
        if (ref) {
          ref->max_abs_s = std::max(ref->max_abs_s, std::abs(double(P[j])));
          double terms = 0;
          for (int64_t c = 0; c < d; ++c) terms += std::abs(double(q[i * d + c]) * double(k[j * d + c]));
          ref->max_abs_s_terms = std::max(ref->max_abs_s_terms, std::abs(double(scale)) * terms);
        }
      }
      T l = 0;
      for (int64_t j = 0; j < visible; ++j) {
        l += rounding == Rounding::kFmaExp2 ? std::exp2(P[j] * log2e - m * log2e) : std::exp(P[j] - m);
      }
      T D_from_o = 0;  // kFromLse: D = dO_i · O_i, with O_i as the forward computed it
      if (rounding == Rounding::kFromLse) {
        std::fill(o_row.begin(), o_row.end(), T(0));
        if (o_given) {  // the O a backward was given: a step's own forward's
          for (int64_t c = 0; c < d; ++c) o_row[c] = T((*o_given)[static_cast<size_t>((bh * s.seq_q + i) * d + c)]);
        } else {
          for (int64_t j = 0; j < visible; ++j) {
            const T w = lowered(std::exp(P[j] - m) / l);  // in 16 bits: P rounded before P·V, O after
            for (int64_t c = 0; c < d; ++c) o_row[c] += w * T(v[j * d + c]);
          }
          for (T& o : o_row) o = lowered(o);
        }
        // Summed in the other order than dP_ij's dot products below, as a kernel's own
        // reduction would: where dP_ij − D_i cancels exactly, it now cancels to rounding.
        for (int64_t c = d - 1; c >= 0; --c) D_from_o += T(g[i * d + c]) * o_row[c];
        const T L = m + std::log(l);
        for (int64_t j = 0; j < visible; ++j) P[j] = std::exp(dS[j] - L);
      } else {
        for (int64_t j = 0; j < visible; ++j) {
          const T e = rounding == Rounding::kFmaExp2 ? std::exp2(P[j] * log2e - m * log2e) : std::exp(P[j] - m);
          P[j] = lowered(e / l);
        }
      }
      // dP_ij = dO_i · V_j, D_i = Σ_j P_ij dP_ij, dS_ij = P_ij (dP_ij − D_i). kFromLse keeps
      // P_ij and dP_ij in fp32, as a tensor-core backward does, and rounds P_ij for dV's product.
      T D = 0;
      for (int64_t j = 0; j < visible; ++j) {
        T dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += T(g[i * d + c]) * T(v[j * d + c]);
        dS[j] = rounding == Rounding::kFromLse ? dot : lowered(dot);
        D += P[j] * dS[j];
      }
      if (rounding == Rounding::kFromLse) D = D_from_o;
      for (int64_t j = 0; j < visible; ++j) dS[j] = lowered(P[j] * (dS[j] - D));
      // dQ_i = scale · dS_i K; dV_j += P_ij dO_i; dK_j += dS_ij Q_i (scaled at the end).
      T* dq_i = dq.data() + (bh * s.seq_q + i) * d;
      for (int64_t j = 0; j < visible; ++j) {
        const T p_low = lowered(P[j]);  // P_ij as dV's product takes it (kFromLse: rounded only here)
        for (int64_t c = 0; c < d; ++c) {
          dq_i[c] += dS[j] * T(k[j * d + c]);
          dv_bh[j * d + c] += p_low * T(g[i * d + c]);
          dk_bh[j * d + c] += dS[j] * T(q[i * d + c]);
        }
      }
      for (int64_t c = 0; c < d; ++c) dq_i[c] = lowered(scale * dq_i[c]);
      if (ref) {
        for (int64_t c = 0; c < d; ++c) {
          double sum = 0;
          for (int64_t j = 0; j < visible; ++j) sum += std::abs(double(dS[j]) * k[j * d + c]);
          ref->magnitude_dq = std::max(ref->magnitude_dq, std::abs(double(scale)) * sum);
        }
        double* mk = magnitude_dk.data() + bh * s.seq_kv * d;
        double* mv = magnitude_dv.data() + bh * s.seq_kv * d;
        for (int64_t j = 0; j < visible; ++j) {
          for (int64_t c = 0; c < d; ++c) {
            mk[j * d + c] += std::abs(double(dS[j]) * q[i * d + c]);
            mv[j * d + c] += std::abs(double(P[j]) * g[i * d + c]);
          }
        }
      }
    }
  }
  for (T& x : dk) x = lowered(scale * x);
  for (T& x : dv) x = lowered(x);
  if (ref) {
    for (double x : magnitude_dk) ref->magnitude_dk = std::max(ref->magnitude_dk, std::abs(double(scale)) * x);
    for (double x : magnitude_dv) ref->magnitude_dv = std::max(ref->magnitude_dv, x);
  }
}

double largest(const std::vector<double>& x) {
  double m = 0;
  for (double e : x) m = std::max(m, std::abs(e));
  return m;
}

// check_gradients on inputs already in `precision`.
GradientVerdict judge(const Problem& problem, const std::vector<float>& d_o, const Gradients& g, Precision precision,
                      const std::vector<float>* o) {
  const ReferenceGradients ref = reference_backward(problem, d_o);
  GradientVerdict v;
  v.errors = max_errors(g, ref);
  v.baseline = baseline_gradient_errors(problem, d_o, ref, precision, o);
  v.tolerance = gradient_tolerance_from(v.baseline, ref, precision);
  const int64_t nonfinite = count_nonfinite(g);
  std::ostringstream why;
  why << std::setprecision(3);
  const auto over = [&why](const char* name, double error, double tolerance) {
    why << "max |" << name << " - " << name << "_ref| = " << error << " is above the tolerance " << tolerance;
  };
  if (g.dq.size() != ref.dq.size() || g.dk.size() != ref.dk.size() || g.dv.size() != ref.dv.size()) {
    why << "the gradients have the wrong size";
  } else if (nonfinite > 0) {
    why << nonfinite << " gradients are NaN or infinite where the fp64 reference is finite";
  } else if (!std::isfinite(v.tolerance.dq) || !std::isfinite(v.tolerance.dk) || !std::isfinite(v.tolerance.dv)) {
    why << "no tolerance can be set: " << name(precision)
        << " standard attention's gradients themselves overflow on these inputs";
  } else if (!(v.errors.dq <= v.tolerance.dq)) {
    over("dQ", v.errors.dq, v.tolerance.dq);
  } else if (!(v.errors.dk <= v.tolerance.dk)) {
    over("dK", v.errors.dk, v.tolerance.dk);
  } else if (!(v.errors.dv <= v.tolerance.dv)) {
    over("dV", v.errors.dv, v.tolerance.dv);
  }
  v.failure = why.str();
  v.passed = v.failure.empty();
  return v;
}

}  // namespace

ReferenceGradients reference_backward(const Problem& problem, const std::vector<float>& d_o) {
  validate(problem);
  if (static_cast<int64_t>(d_o.size()) != problem.shape.q_elements()) {
    throw InputError("dO has " + std::to_string(d_o.size()) + " elements but the shape needs " +
                     std::to_string(problem.shape.q_elements()));
  }
  ReferenceGradients ref;
  standard_backward<double>(problem, d_o, ref.dq, ref.dk, ref.dv, Rounding::kPlain, Precision::fp32, &ref);
  return ref;
}

Gradients standard_backward_in(const Problem& problem, const std::vector<float>& d_o, Precision precision) {
  Gradients g;
  standard_backward<float>(problem, d_o, g.dq, g.dk, g.dv, Rounding::kPlain, precision);
  return g;
}

GradientErrors max_errors(const Gradients& g, const ReferenceGradients& ref) {
  return GradientErrors{max_abs_error(g.dq, ref.dq), max_abs_error(g.dk, ref.dk), max_abs_error(g.dv, ref.dv)};
}

GradientErrors baseline_gradient_errors(const Problem& problem, const std::vector<float>& d_o,
                                        const ReferenceGradients& ref, Precision precision,
                                        const std::vector<float>* o) {
  // In 16 bits the rounding of P, dS and the outputs is hundreds of times fp32's, and the
  // fp32 formulations differ by nothing next to it; but where D_i comes from also matters
  // there: dP_ij − D_i cancels when one key dominates a row (scores of size 10³), exactly
  // with autograd's D_i = Σ_j P_ij dP_ij, and only to the 16-bit rounding of O with D_i =
  // dO_i · O_i, which every FlashAttention backward uses.
  const std::vector<Rounding> formulations =
      precision == Precision::fp32
          ? std::vector<Rounding>{Rounding::kPlain, Rounding::kPrescaledQ, Rounding::kFmaExp2, Rounding::kFromLse}
          : std::vector<Rounding>{Rounding::kPlain, Rounding::kFromLse};
  GradientErrors worst;
  const auto take = [&](Rounding r, const std::vector<float>* given) {
    Gradients g;
    standard_backward<float>(problem, d_o, g.dq, g.dk, g.dv, r, precision, nullptr, given);
    const GradientErrors e = max_errors(g, ref);
    worst.dq = std::max(worst.dq, e.dq);
    worst.dk = std::max(worst.dk, e.dk);
    worst.dv = std::max(worst.dv, e.dv);
  };
  for (Rounding r : formulations) take(r, nullptr);
  // And FlashAttention's formulation on the O the step was given (its own forward's, within
  // the forward's rule of a 16-bit O): where dP_ij − D_i cancels, D_i's error is O's, which
  // no backward can undo.
  if (precision != Precision::fp32 && o != nullptr) take(Rounding::kFromLse, o);
  return worst;
}

GradientTolerance gradient_tolerance_from(const GradientErrors& baseline, const ReferenceGradients& ref,
                                          Precision precision) {
  const double scores = unit_roundoff(Precision::fp32) / 2 * std::max(ref.max_abs_s, ref.max_abs_s_terms);
  const auto floor = [&](double magnitude, const std::vector<double>& exact) {
    double f = std::max(kToleranceFloor, scores * magnitude);
    if (precision != Precision::fp32) f = std::max(f, unit_roundoff(precision) / 2 * largest(exact));
    return f;
  };
  return GradientTolerance{2 * baseline.dq + floor(ref.magnitude_dq, ref.dq),
                           2 * baseline.dk + floor(ref.magnitude_dk, ref.dk),
                           2 * baseline.dv + floor(ref.magnitude_dv, ref.dv)};
}

GradientVerdict check_gradients(const Problem& problem, const std::vector<float>& d_o, const Gradients& g,
                                Precision precision, const std::vector<float>* o) {
  if (o != nullptr && static_cast<int64_t>(o->size()) != problem.shape.q_elements()) {
    throw InputError("O has " + std::to_string(o->size()) + " elements but the shape needs " +
                     std::to_string(problem.shape.q_elements()));
  }
  if (precision == Precision::fp32) return judge(problem, d_o, g, precision, o);
  const Shape& s = problem.shape;
  return judge(rounded_inputs(problem, precision), rounded_tensor(d_o, precision, s, s.seq_q, "dO"), g, precision, o);
}

}  // namespace common
