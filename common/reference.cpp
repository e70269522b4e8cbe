/// \file reference.cpp
/// \brief fp64 reference, fp32 baseline, error metrics and the tolerance rule.
#include "common/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace common {

namespace {

// Where a float implementation rounds. The reference uses kPlain in double.
enum class Rounding {
  kPlain,      // s = scale · (q·k), p = exp(s − m)
  kPrescaledQ, // s = (scale · q)·k: Q scaled first, as many GPU kernels do
  kFmaExp2,    // q·k accumulated with fused multiply-adds (as GPUs do), p = 2^(s·log2e − m·log2e)
};

// Standard attention with every intermediate in T (double for the reference,
// float for the baseline). One (b, h, query row) at a time, in plain loops.
template <class T>
void standard_attention(const Problem& p, std::vector<T>& o, std::vector<T>& lse,
                        Rounding rounding = Rounding::kPlain) {
  const Shape& s = p.shape;
  const int64_t d = s.head_dim;
  const T scale = T(p.scale);
  const T log2e = T(1.4426950408889634);
  o.assign(static_cast<size_t>(s.q_elements()), T(0));
  lse.assign(static_cast<size_t>(s.lse_elements()), T(0));
  std::vector<T> scores(static_cast<size_t>(s.seq_kv));
  for (int64_t bh = 0; bh < s.batch_heads(); ++bh) {
    const float* q = p.q.data() + bh * s.seq_q * d;
    const float* k = p.k.data() + bh * s.seq_kv * d;
    const float* v = p.v.data() + bh * s.seq_kv * d;
    for (int64_t i = 0; i < s.seq_q; ++i) {
      // Causal, top-left aligned: query i sees keys 0..i.
      const int64_t visible = p.causal ? std::min(i + 1, s.seq_kv) : s.seq_kv;
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < visible; ++j) {
        T dot = 0;
        if (rounding == Rounding::kPrescaledQ) {
          for (int64_t c = 0; c < d; ++c) dot += (scale * T(q[i * d + c])) * T(k[j * d + c]);
          scores[j] = dot;
        } else if (rounding == Rounding::kFmaExp2) {
          for (int64_t c = 0; c < d; ++c) dot = std::fma(T(q[i * d + c]), T(k[j * d + c]), dot);
          scores[j] = scale * dot;
        } else {
          for (int64_t c = 0; c < d; ++c) dot += T(q[i * d + c]) * T(k[j * d + c]);
          scores[j] = scale * dot;
        }
        m = std::max(m, scores[j]);
      }
      T l = 0;
      for (int64_t j = 0; j < visible; ++j) {
        scores[j] = rounding == Rounding::kFmaExp2 ? std::exp2(scores[j] * log2e - m * log2e)
                                                : std::exp(scores[j] - m);
        l += scores[j];
      }
      T* out = o.data() + (bh * s.seq_q + i) * d;
      for (int64_t j = 0; j < visible; ++j) {
        for (int64_t c = 0; c < d; ++c) out[c] += scores[j] * T(v[j * d + c]);
      }
      for (int64_t c = 0; c < d; ++c) out[c] /= l;
      lse[bh * s.seq_q + i] = m + std::log(l);
    }
  }
}

double max_abs_diff(const std::vector<float>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(double(got[i]) - want[i]);
    if (!(e <= worst)) worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
  }
  return worst;
}

}  // namespace

Reference reference_attention(const Problem& problem) {
  validate(problem);
  Reference ref;
  standard_attention<double>(problem, ref.o, ref.lse);
  return ref;
}

Result standard_attention_fp32(const Problem& problem) {
  validate(problem);
  Result r;
  standard_attention<float>(problem, r.o, r.lse);
  return r;
}

Errors max_errors(const Result& result, const Reference& ref) {
  return Errors{max_abs_diff(result.o, ref.o), max_abs_diff(result.lse, ref.lse)};
}

Errors baseline_errors(const Problem& problem, const Reference& ref) {
  Errors worst;
  for (Rounding r : {Rounding::kPlain, Rounding::kPrescaledQ, Rounding::kFmaExp2}) {
    Result fp32;
    standard_attention<float>(problem, fp32.o, fp32.lse, r);
    const Errors e = max_errors(fp32, ref);
    worst.max_err_o = std::max(worst.max_err_o, e.max_err_o);
    worst.max_err_lse = std::max(worst.max_err_lse, e.max_err_lse);
  }
  return worst;
}

Tolerance tolerance_for(const Problem& problem, const Reference& ref) {
  const Errors base = baseline_errors(problem, ref);
  return Tolerance{2 * base.max_err_o + kToleranceFloor, 2 * base.max_err_lse + kToleranceFloor};
}

Verdict check_result(const Problem& problem, const Result& result) {
  const Reference ref = reference_attention(problem);
  Verdict v;
  v.errors = max_errors(result, ref);
  v.baseline = baseline_errors(problem, ref);
  v.tolerance = Tolerance{2 * v.baseline.max_err_o + kToleranceFloor,
                          2 * v.baseline.max_err_lse + kToleranceFloor};
  v.passed = v.errors.max_err_o <= v.tolerance.o && v.errors.max_err_lse <= v.tolerance.lse;
  return v;
}

}  // namespace common
