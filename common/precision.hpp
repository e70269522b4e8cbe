/// \file precision.hpp
/// \brief The precisions a step may compute in (fp32, bf16, fp16) and rounding to them.
///
/// Tensors are float32 at every interface. A step that computes in bf16 or fp16
/// (tensor cores) rounds Q, K and V once when it uploads them, as PyTorch does
/// when a float tensor is cast with `.to(torch.bfloat16)`; its O comes back
/// rounded to the same precision. The conversions here are the CPU's twins of
/// CUDA's `__float2bfloat16_rn` and `__float2half_rn` (round to nearest, ties to
/// even, overflow to infinity), bit for bit, so that the check can reproduce on
/// the CPU exactly the inputs a kernel saw.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace common {

/// The number format a step computes in. Accumulation is always fp32.
enum class Precision {
  fp32,  ///< IEEE single: 8 exponent bits, 23 fraction bits
  bf16,  ///< bfloat16: fp32's 8 exponent bits, 7 fraction bits (relative step 2^-8)
  fp16,  ///< IEEE half: 5 exponent bits, 10 fraction bits, largest finite 65504
};

/// "fp32", "bf16" or "fp16": the spelling of `--dtype`.
const char* name(Precision precision);

/// "fp32, bf16": the names of `precisions`, in order.
std::string names(const std::vector<Precision>& precisions);

/// The precision `text` names ("fp32", "bf16", "fp16"), or an InputError that lists them.
Precision parse_precision(const std::string& text);

/// `x` rounded to bfloat16 (nearest, ties to even; NaN stays NaN), as bits.
uint16_t to_bf16_bits(float x);
/// The float a bfloat16 bit pattern stands for (exact).
float from_bf16_bits(uint16_t bits);

/// `x` rounded to IEEE half (nearest, ties to even, subnormals kept, |x| >= 65520
/// becomes infinity; NaN stays NaN), as bits.
uint16_t to_fp16_bits(float x);
/// The float an IEEE half bit pattern stands for (exact).
float from_fp16_bits(uint16_t bits);

/// `x` rounded to `precision` and widened back to float (fp32: `x` itself).
float round_to(Precision precision, float x);

/// The unit roundoff u of `precision`: rounding to nearest moves x by at most
/// u·|x| (2^-24 for fp32, 2^-8 for bf16, 2^-11 for fp16; normal numbers).
double unit_roundoff(Precision precision);

struct Problem;
struct Shape;

/// `problem` with Q, K and V rounded to `precision`: the inputs a kernel that
/// computes in `precision` sees (fp32: an unchanged copy). Validates `problem`
/// first. Throws InputError naming the tensor and the element's (b, h, n, c)
/// index when a value does not fit (fp16: |x| >= 65520 would become infinity),
/// so that a kernel never sees an infinity the caller did not give it.
Problem rounded_inputs(const Problem& problem, Precision precision);

/// `data`, a (B, H, `seq`, d) tensor of `shape` named `tensor`, rounded to
/// `precision` (fp32: an unchanged copy), refusing a value that does not fit as
/// rounded_inputs does. The backward rounds dO with it.
std::vector<float> rounded_tensor(const std::vector<float>& data, Precision precision, const Shape& shape, int64_t seq,
                                  const std::string& tensor);

}  // namespace common
