/// \file reference.cpp
/// \brief fp64 reference, fp32 baseline, error metrics and the tolerance rule.
#include "common/reference.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

namespace common {

namespace {

// Where a float implementation rounds. The reference uses kPlain in double.
enum class Rounding {
  kPlain,  // s = scale · (q·k), p = exp(s − m)
  kPrescaledQ,  // s = (scale · q)·k: Q scaled first, as many GPU kernels do
  kFmaExp2,  // q·k accumulated with fused multiply-adds (as GPUs do), p = 2^(s·log2e − m·log2e)
};

// Standard attention with every intermediate in T (double for the reference,
// float for the baselines). One (b, h, query row) at a time, in plain loops.
// With `low` bf16 or fp16 (T = float, inputs already rounded), as a library
// computes in that precision: S and the softmax in fp32, P = softmax(S) rounded
// before P·V, fp32 accumulation, O rounded at the end; L stays fp32.
template <class T>
void standard_attention(const Problem& p, std::vector<T>& o, std::vector<T>& lse, Rounding rounding = Rounding::kPlain,
                        Precision low = Precision::fp32, double* max_abs_s = nullptr) {
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
        if (max_abs_s) *max_abs_s = std::max(*max_abs_s, std::abs(double(scores[j])));
      }
      T l = 0;
      for (int64_t j = 0; j < visible; ++j) {
        scores[j] = rounding == Rounding::kFmaExp2 ? std::exp2(scores[j] * log2e - m * log2e) : std::exp(scores[j] - m);
        l += scores[j];
      }
      T* out = o.data() + (bh * s.seq_q + i) * d;
      for (int64_t j = 0; j < visible; ++j) {
        const T w = low == Precision::fp32 ? scores[j] : T(round_to(low, float(scores[j] / l)));
        for (int64_t c = 0; c < d; ++c) out[c] += w * T(v[j * d + c]);
      }
      for (int64_t c = 0; c < d; ++c) out[c] = low == Precision::fp32 ? out[c] / l : T(round_to(low, float(out[c])));
      lse[bh * s.seq_q + i] = m + std::log(l);
    }
  }
}

}  // namespace

double max_abs_error(const std::vector<float>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(double(got[i]) - want[i]);
    if (!(e <= worst)) worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
  }
  return worst;
}

Reference reference_attention(const Problem& problem) {
  validate(problem);
  Reference ref;
  standard_attention<double>(problem, ref.o, ref.lse, Rounding::kPlain, Precision::fp32, &ref.max_abs_s);
  for (const float x : problem.v) ref.max_abs_v = std::max(ref.max_abs_v, std::abs(double(x)));
  return ref;
}

Result standard_attention_fp32(const Problem& problem) {
  validate(problem);
  Result r;
  standard_attention<float>(problem, r.o, r.lse);
  return r;
}

Result standard_attention_in(const Problem& problem, Precision precision) {
  if (precision == Precision::fp32) return standard_attention_fp32(problem);
  const Problem rounded = rounded_inputs(problem, precision);
  Result r;
  standard_attention<float>(rounded, r.o, r.lse, Rounding::kPlain, precision);
  return r;
}

Errors max_errors(const Result& result, const Reference& ref) {
  return Errors{max_abs_error(result.o, ref.o), max_abs_error(result.lse, ref.lse)};
}

Errors baseline_errors(const Problem& problem, const Reference& ref, Precision precision) {
  // fp32 standard attention, three ways (L is fp32 in every precision).
  Errors worst;
  for (Rounding r : {Rounding::kPlain, Rounding::kPrescaledQ, Rounding::kFmaExp2}) {
    Result fp32;
    standard_attention<float>(problem, fp32.o, fp32.lse, r);
    const Errors e = max_errors(fp32, ref);
    worst.max_err_o = std::max(worst.max_err_o, e.max_err_o);
    worst.max_err_lse = std::max(worst.max_err_lse, e.max_err_lse);
  }
  if (precision != Precision::fp32) {
    Result low;
    standard_attention<float>(problem, low.o, low.lse, Rounding::kPlain, precision);
    const Errors e = max_errors(low, ref);
    worst.max_err_o = e.max_err_o;  // bf16/fp16 rounding of P and O: hundreds of times fp32's
    worst.max_err_lse = std::max(worst.max_err_lse, e.max_err_lse);
  }
  return worst;
}

Tolerance tolerance_from(const Errors& baseline, const Reference& ref, Precision precision) {
  return Tolerance{2 * baseline.max_err_o + tolerance_floor_o(ref, precision),
                   2 * baseline.max_err_lse + tolerance_floor_lse(ref)};
}

Tolerance tolerance_for(const Problem& problem, const Reference& ref, Precision precision) {
  return tolerance_from(baseline_errors(problem, ref, precision), ref, precision);
}

double tolerance_floor_o(const Reference& ref, Precision precision) {
  // Storing two nearly tied scores in fp32 moves their difference by up to 2·u·max|S|,
  // and the row of O they decide, (P_1 − P_2)/2 · (v_1 − v_2), by up to u·max|S|·max|V|.
  double floor = std::max(kToleranceFloor, unit_roundoff(Precision::fp32) / 2 * ref.max_abs_s * ref.max_abs_v);
  if (precision == Precision::fp32) return floor;
  double largest = 0;
  for (double x : ref.o) largest = std::max(largest, std::abs(x));
  // Rounding x to `precision` moves it by at most u·|x|.
  return std::max(floor, unit_roundoff(precision) / 2 * largest);
}

double tolerance_floor_lse(const Reference& ref) {
  // Storing the scores in fp32 moves L = m + log Σ exp(s − m) by up to u·max|S|.
  return std::max(kToleranceFloor, unit_roundoff(Precision::fp32) / 2 * ref.max_abs_s);
}

namespace {

// check_result on inputs already in `precision`.
Verdict judge(const Problem& problem, const Result& result, Precision precision) {
  const Reference ref = reference_attention(problem);
  Verdict v;
  v.errors = max_errors(result, ref);
  v.baseline = baseline_errors(problem, ref, precision);
  v.tolerance = tolerance_from(v.baseline, ref, precision);
  int64_t nonfinite = 0;
  for (float x : result.o) nonfinite += std::isfinite(x) ? 0 : 1;
  for (float x : result.lse) nonfinite += std::isfinite(x) ? 0 : 1;
  std::ostringstream why;
  why << std::setprecision(3);
  if (result.o.size() != ref.o.size() || result.lse.size() != ref.lse.size()) {
    why << "the result has the wrong size";
  } else if (nonfinite > 0) {
    why << nonfinite << " outputs are NaN or infinite where the fp64 reference is finite";
  } else if (!std::isfinite(v.tolerance.o) || !std::isfinite(v.tolerance.lse)) {
    why << "no tolerance can be set: " << name(precision) << " standard attention itself overflows on these inputs";
  } else if (!(v.errors.max_err_o <= v.tolerance.o)) {
    why << "max |O - O_ref| = " << v.errors.max_err_o << " is above the tolerance " << v.tolerance.o;
  } else if (!(v.errors.max_err_lse <= v.tolerance.lse)) {
    why << "max |L - L_ref| = " << v.errors.max_err_lse << " is above the tolerance " << v.tolerance.lse;
  }
  v.failure = why.str();
  v.passed = v.failure.empty();
  return v;
}

}  // namespace

Verdict check_result(const Problem& problem, const Result& result, Precision precision) {
  // fp32 needs no copy of the inputs (they may be gigabytes).
  if (precision == Precision::fp32) return judge(problem, result, precision);
  return judge(rounded_inputs(problem, precision), result, precision);
}

}  // namespace common
