/// \file precision.cpp
/// \brief Rounding float to bfloat16 and IEEE half, bit for bit as CUDA does.
#include "common/precision.hpp"

#include <cmath>
#include <cstring>
#include <sstream>

#include "common/problem.hpp"

namespace common {

namespace {

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace

const char* name(Precision precision) {
  switch (precision) {
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
    case Precision::fp32: break;
  }
  return "fp32";
}

std::string names(const std::vector<Precision>& precisions) {
  std::string list;
  for (Precision p : precisions) list += (list.empty() ? "" : ", ") + std::string(name(p));
  return list;
}

Precision parse_precision(const std::string& text) {
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16}) {
    if (text == name(p)) return p;
  }
  throw InputError("--dtype: '" + text + "' is not a precision (fp32, bf16 or fp16)");
}

uint16_t to_bf16_bits(float x) {
  const uint32_t u = bits_of(x);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x0040);  // keep the sign, make it quiet
  // Add just under half of the dropped part's unit, plus one when the kept part
  // is odd: a tie then carries only from an odd value (ties to even). A carry
  // out of the fraction raises the exponent; out of the largest exponent it
  // gives infinity, as rounding should.
  const uint32_t odd = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7FFFu + odd) >> 16);
}

float from_bf16_bits(uint16_t bits) { return float_of(uint32_t{bits} << 16); }

uint16_t to_fp16_bits(float x) {
  const uint32_t u = bits_of(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;  // NaN
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 = 65504 + half a step: infinity
  if (a < 0x38800000u) {
    // Below 2^-14, half has only subnormals, multiples of 2^-24. Scaling by 2^24
    // is exact, and nearbyint rounds to nearest, ties to even; 1024 (a carry to
    // the smallest normal) encodes correctly as exponent 1, fraction 0.
    const float units = std::nearbyint(float_of(a) * 16777216.0f);
    return sign | static_cast<uint16_t>(units);
  }
  // Normal: rebias the exponent (127 -> 15) and keep the top 10 fraction bits,
  // rounding the 13 dropped bits to nearest, ties to even.
  uint32_t h = ((a >> 23) - 112u) << 10 | ((a & 0x7FFFFFu) >> 13);
  const uint32_t dropped = a & 0x1FFFu;
  if (dropped > 0x1000u || (dropped == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

float from_fp16_bits(uint16_t bits) {
  const float sign = (bits & 0x8000u) ? -1.0f : 1.0f;
  const int exponent = (bits >> 10) & 0x1F;
  const int fraction = bits & 0x3FF;
  if (exponent == 0) return sign * std::ldexp(float(fraction), -24);
  if (exponent == 31) return fraction ? std::nanf("") : sign * INFINITY;
  return sign * std::ldexp(float(1024 + fraction), exponent - 25);
}

float round_to(Precision precision, float x) {
  switch (precision) {
    case Precision::bf16: return from_bf16_bits(to_bf16_bits(x));
    case Precision::fp16: return from_fp16_bits(to_fp16_bits(x));
    case Precision::fp32: break;
  }
  return x;
}

double unit_roundoff(Precision precision) {
  switch (precision) {
    case Precision::bf16: return std::ldexp(1.0, -8);  // 8 significant bits
    case Precision::fp16: return std::ldexp(1.0, -11);  // 11
    case Precision::fp32: break;
  }
  return std::ldexp(1.0, -24);  // 24
}

namespace {

void round_tensor(std::vector<float>& data, Precision precision, const Shape& shape, int64_t seq, const char* tensor) {
  for (size_t e = 0; e < data.size(); ++e) {
    const float r = round_to(precision, data[e]);
    if (!std::isfinite(r)) {
      std::ostringstream msg;
      msg << tensor << " holds " << data[e] << " at " << element_index(shape, seq, int64_t(e)) << ", beyond "
          << name(precision) << "'s largest finite value (" << (precision == Precision::fp16 ? "65504" : "3.39e38")
          << ")";
      throw InputError(msg.str());
    }
    data[e] = r;
  }
}

}  // namespace

Problem rounded_inputs(const Problem& problem, Precision precision) {
  validate(problem);
  Problem p = problem;
  if (precision == Precision::fp32) return p;
  const Shape& s = p.shape;
  round_tensor(p.q, precision, s, s.seq_q, "Q");
  round_tensor(p.k, precision, s, s.seq_kv, "K");
  round_tensor(p.v, precision, s, s.seq_kv, "V");
  return p;
}

std::vector<float> rounded_tensor(const std::vector<float>& data, Precision precision, const Shape& shape, int64_t seq,
                                  const std::string& tensor) {
  std::vector<float> r = data;
  if (precision != Precision::fp32) round_tensor(r, precision, shape, seq, tensor.c_str());
  return r;
}

}  // namespace common
