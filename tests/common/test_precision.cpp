/// \file test_precision.cpp
/// \brief Tests of what the tensor-core steps stand on: rounding to bf16 and fp16,
/// the same-precision baseline and its tolerance rule, `--dtype`, and the
/// mma.sync / ldmatrix fragment layouts.
#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "common/cuda/fragments.hpp"
#include "common/fixtures.hpp"
#include "common/precision.hpp"
#include "common/reference.hpp"
#include "common/testing.hpp"

using namespace common;

namespace {

float float_of(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

uint16_t bits_in(Precision p, float x) { return p == Precision::bf16 ? to_bf16_bits(x) : to_fp16_bits(x); }
float value_of(Precision p, uint16_t bits) {
  return p == Precision::bf16 ? from_bf16_bits(bits) : from_fp16_bits(bits);
}

// A flash-style kernel's arithmetic in `p`, on inputs already rounded: keys in
// tiles of 64, a running maximum, P̃ = exp(S - m) rounded to `p` before P̃·V,
// l summed from P̃ before rounding, O and l rescaled in fp32, O rounded once
// at the end. What a correct tensor-core step computes, up to summation order.
Result flash_style(const Problem& pb, Precision p) {
  const Shape& s = pb.shape;
  const int64_t d = s.head_dim, tile = 64;
  Result r = allocate_result(s);
  std::vector<float> acc(static_cast<size_t>(d));
  for (int64_t bh = 0; bh < s.batch_heads(); ++bh) {
    for (int64_t i = 0; i < s.seq_q; ++i) {
      const float* q = pb.q.data() + (bh * s.seq_q + i) * d;
      const int64_t visible = pb.causal ? std::min(i + 1, s.seq_kv) : s.seq_kv;
      float m = -INFINITY, l = 0;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j0 = 0; j0 < visible; j0 += tile) {
        const int64_t j1 = std::min(j0 + tile, visible);
        std::vector<float> sc;
        float m_new = m;
        for (int64_t j = j0; j < j1; ++j) {
          const float* k = pb.k.data() + (bh * s.seq_kv + j) * d;
          float dot = 0;
          for (int64_t c = 0; c < d; ++c) dot = std::fma(q[c], k[c], dot);
          sc.push_back(pb.scale * dot);
          m_new = std::max(m_new, sc.back());
        }
        const float alpha = std::exp(m - m_new);
        l *= alpha;
        for (float& a : acc) a *= alpha;
        for (int64_t j = j0; j < j1; ++j) {
          const float pt = std::exp(sc[size_t(j - j0)] - m_new);
          l += pt;
          const float pr = round_to(p, pt);
          const float* v = pb.v.data() + (bh * s.seq_kv + j) * d;
          for (int64_t c = 0; c < d; ++c) acc[size_t(c)] = std::fma(pr, v[c], acc[size_t(c)]);
        }
        m = m_new;
      }
      for (int64_t c = 0; c < d; ++c) r.o[size_t((bh * s.seq_q + i) * d + c)] = round_to(p, acc[size_t(c)] / l);
      r.lse[size_t(bh * s.seq_q + i)] = m + std::log(l);
    }
  }
  return r;
}

// A step that computes standard attention in whichever precision it is asked for.
StepInfo low_precision_step() {
  StepInfo s;
  s.name = "bf16_step";
  s.title = "standard attention in bf16, for driver tests";
  s.forward = [](const Problem& p, const Options& o) { return standard_attention_in(p, o.precision); };
  s.precisions = {Precision::bf16, Precision::fp16, Precision::fp32};
  return s;
}

}  // namespace

TEST_CASE("bf16: round to nearest, ties to even, overflow to infinity, bit for bit") {
  CHECK(to_bf16_bits(1.0f) == 0x3F80);
  CHECK(to_bf16_bits(float_of(0x3F808000)) == 0x3F80);  // 1 + 2^-8: a tie, 1 is even
  CHECK(to_bf16_bits(float_of(0x3F818000)) == 0x3F82);  // 1 + 3·2^-8: a tie, up to the even 1 + 2^-6
  CHECK(to_bf16_bits(float_of(0x3F808001)) == 0x3F81);  // just above the tie
  CHECK(to_bf16_bits(-0.0f) == 0x8000);
  CHECK(to_bf16_bits(-2.5f) == 0xC020);
  CHECK(to_bf16_bits(FLT_MAX) == 0x7F80);  // beyond the largest bf16 (0x7F7F): infinity
  CHECK(from_bf16_bits(0x7F7F) == float_of(0x7F7F0000));
  CHECK(std::isnan(from_bf16_bits(to_bf16_bits(std::nanf("")))));
  CHECK(std::isinf(round_to(Precision::bf16, INFINITY)));
}

TEST_CASE("fp16: round to nearest, ties to even, subnormals, 65520 and beyond to infinity") {
  CHECK(to_fp16_bits(1.0f) == 0x3C00);
  CHECK(to_fp16_bits(-2.0f) == 0xC000);
  CHECK(to_fp16_bits(1.0f / 3) == 0x3555);
  CHECK(to_fp16_bits(0.1f) == 0x2E66);
  CHECK(to_fp16_bits(std::ldexp(1.0f, -11) + 1) == 0x3C00);  // a tie, 1 is even
  CHECK(to_fp16_bits(3 * std::ldexp(1.0f, -11) + 1) == 0x3C02);  // a tie, up to even
  CHECK(to_fp16_bits(65504.0f) == 0x7BFF);
  CHECK(to_fp16_bits(65519.0f) == 0x7BFF);
  CHECK(to_fp16_bits(65520.0f) == 0x7C00);
  CHECK(to_fp16_bits(-1e6f) == 0xFC00);
  CHECK(to_fp16_bits(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(to_fp16_bits(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(to_fp16_bits(std::ldexp(1.0f, -25)) == 0x0000);  // a tie, 0 is even
  CHECK(to_fp16_bits(3 * std::ldexp(1.0f, -25)) == 0x0002);  // a tie, up to even
  CHECK(to_fp16_bits(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)) == 0x0400);  // carries into the normals
  CHECK(from_fp16_bits(0x7BFF) == 65504.0f);
  CHECK(from_fp16_bits(0x8001) == -std::ldexp(1.0f, -24));
  CHECK(std::isnan(from_fp16_bits(to_fp16_bits(std::nanf("")))));
}

TEST_CASE("bf16 and fp16: every value round-trips; every float rounds to a nearest neighbour, ties to even") {
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    INFO(std::string(name(p)));
    for (uint32_t b = 0; b < 0x10000; ++b) {
      const float x = value_of(p, uint16_t(b));
      if (!std::isnan(x)) REQUIRE(bits_in(p, x) == b);
    }
    const uint16_t inf_bits = p == Precision::bf16 ? 0x7F80 : 0x7C00;
    uint64_t state = testing::run_seed();
    int checked = 0;
    for (int n = 0; n < 300000; ++n) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      // bf16: any float's bits; fp16: a random fraction in every binade from 2^-30 to 2^17.
      const float x = p == Precision::bf16 ? std::fabs(float_of(uint32_t(state >> 32)))
                                           : std::ldexp(1.0f + float(state >> 41) * 0x1p-23f, int(state % 48) - 30);
      const uint16_t b = bits_in(p, x);
      if (!std::isfinite(x) || b >= inf_bits) continue;
      const double err = std::fabs(double(x) - value_of(p, b));
      const double up = std::fabs(double(x) - value_of(p, uint16_t(b + 1)));
      const double down = b > 0 ? std::fabs(double(x) - value_of(p, uint16_t(b - 1))) : INFINITY;
      REQUIRE(err <= up);
      REQUIRE(err <= down);
      if (err == up || err == down) REQUIRE(b % 2 == 0);
      ++checked;
    }
    CHECK(checked > 200000);
  }
}

TEST_CASE("rounded_inputs: fp32 is a copy; bf16 values are representable; too large for fp16 is refused") {
  Problem p = make_random_problem(Shape{2, 3, 5, 7, 8}, false, std::nullopt, testing::run_seed());
  CHECK(rounded_inputs(p, Precision::fp32).q == p.q);
  const Problem b = rounded_inputs(p, Precision::bf16);
  for (float x : b.k) REQUIRE(round_to(Precision::bf16, x) == x);
  CHECK(b.q != p.q);
  p.v[size_t((1 * 3 + 2) * 7 * 8 + 4 * 8 + 6)] = 70000.0f;
  CHECK_THROWS_WITH_AS(rounded_inputs(p, Precision::fp16),
                       "V holds 70000 at [b=1, h=2, n=4, c=6], beyond fp16's largest finite value (65504)", InputError);
  CHECK(rounded_inputs(p, Precision::bf16).v.size() == p.v.size());
}

TEST_CASE("same-precision baseline: O in the precision, errors of bf16's and fp16's size, not fp32's") {
  const Problem p = make_random_problem(Shape{1, 2, 37, 45, 64}, true, std::nullopt, testing::run_seed());
  const Errors fp32 = max_errors(standard_attention_fp32(p), reference_attention(p));
  for (Precision prec : {Precision::bf16, Precision::fp16}) {
    INFO(std::string(name(prec)));
    const Problem r = rounded_inputs(p, prec);
    const Result low = standard_attention_in(p, prec);
    for (float x : low.o) REQUIRE(round_to(prec, x) == x);
    const Errors e = max_errors(low, reference_attention(r));
    // O is within [-1, 1]: bf16's half step there is 2^-9 ~ 2e-3, fp16's 2^-12 ~ 2.4e-4.
    CHECK(e.max_err_o > 20 * fp32.max_err_o);
    CHECK(e.max_err_o < (prec == Precision::bf16 ? 2e-2 : 3e-3));
    CHECK(e.max_err_lse < 1e-5);  // L stays fp32
  }
}

TEST_CASE(
    "tolerance in bf16 and fp16: correct low-precision kernels pass, a wrong one does not, fp32's rule would reject "
    "them") {
  uint64_t seed = testing::run_seed();
  for (Precision prec : {Precision::bf16, Precision::fp16}) {
    for (const Shape& shape : {Shape{1, 2, 65, 130, 64}, Shape{2, 1, 128, 77, 128}, Shape{1, 1, 3, 200, 32}}) {
      for (bool causal : {false, true}) {
        const Problem p = make_random_problem(shape, causal, std::nullopt, ++seed);
        INFO(std::string(name(prec)) << ", " << describe(shape) << std::string(causal ? " causal" : "")
                                     << ", FLASH_TEST_SEED=" << seed);
        const Problem r = rounded_inputs(p, prec);
        const Result flash = flash_style(r, prec);
        const Verdict v = check_result(p, flash, prec);
        CHECK_MESSAGE(v.passed, v.failure);
        CHECK_FALSE(check_result(p, flash, Precision::fp32).passed);
        // The exact answer, rounded once: the best a kernel in `prec` can do.
        const Reference exact = reference_attention(r);
        Result best = allocate_result(shape);
        for (size_t i = 0; i < best.o.size(); ++i) best.o[i] = round_to(prec, float(exact.o[i]));
        for (size_t i = 0; i < best.lse.size(); ++i) best.lse[i] = float(exact.lse[i]);
        CHECK(check_result(p, best, prec).passed);
        // One element off by three times the tolerance fails.
        Result wrong = flash;
        wrong.o[wrong.o.size() / 2] += float(3 * v.tolerance.o);
        CHECK_FALSE(check_result(p, wrong, prec).passed);
      }
    }
  }
}

TEST_CASE("--dtype: a step computes in the precisions it declares and refuses others in one line") {
  std::string out, err;
  const std::vector<std::string> shape = {"--batch",  "1",  "--heads",    "2",  "--seq-q", "33",
                                          "--seq-kv", "40", "--head-dim", "64", "--check"};
  const StepInfo low = low_precision_step();
  CHECK(testing::run_program_captured(low, shape, &out, &err) == 0);
  CHECK(out.find(" bf16\n") != std::string::npos);  // the native precision is the default
  CHECK(out.find("PASS (tolerance = 2 x bf16 standard attention's error") != std::string::npos);
  std::vector<std::string> args = shape;
  args.insert(args.end(), {"--dtype", "fp16", "--json"});
  CHECK(testing::run_program_captured(low, args, &out, &err) == 0);
  CHECK(out.find("\"dtype\":\"fp16\"") != std::string::npos);
  CHECK(out.find("\"passed\":true") != std::string::npos);

  StepInfo fp32_only = low;
  fp32_only.name = "fp32_step";
  fp32_only.precisions = {Precision::fp32};
  args = shape;
  args.insert(args.end(), {"--dtype", "bf16"});
  CHECK(testing::run_program_captured(fp32_only, args, &out, &err) == 2);
  CHECK(err == "fp32_step: error: fp32_step computes in fp32 only; --dtype bf16 is not one of its precisions\n");
  CHECK(out.empty());
  CHECK(testing::run_program_captured(low, {"--dtype", "fp8"}, &out, &err) == 2);
  CHECK(err == "bf16_step: error: --dtype: 'fp8' is not a precision (fp32, bf16 or fp16)\n");

  // The library refuses it too: a session is never opened in a precision the step lacks.
  Options options;
  options.precision = Precision::fp16;
  const Problem p = make_random_problem(Shape{1, 1, 4, 4, 8}, false, std::nullopt, 1);
  CHECK_THROWS_AS(open_session(fp32_only, p, options), InputError);
}

namespace {
using common::mma::RowCol;
bool same(RowCol a, RowCol b) { return a.row == b.row && a.col == b.col; }
}  // namespace

TEST_CASE("mma.m16n8k16 fragments: the PTX ISA's tables, each element held by exactly one lane") {
  using namespace common::mma;
  // Lanes 0, 6 (group 1, quad 2) and 31 (group 7, quad 3), read off the ISA's figures.
  const RowCol a0[8] = {{0, 0}, {0, 1}, {8, 0}, {8, 1}, {0, 8}, {0, 9}, {8, 8}, {8, 9}};
  const RowCol a6[8] = {{1, 4}, {1, 5}, {9, 4}, {9, 5}, {1, 12}, {1, 13}, {9, 12}, {9, 13}};
  const RowCol a31[8] = {{7, 6}, {7, 7}, {15, 6}, {15, 7}, {7, 14}, {7, 15}, {15, 14}, {15, 15}};
  for (int i = 0; i < 8; ++i) {
    CHECK(same(a_m16k16(0, i), a0[i]));
    CHECK(same(a_m16k16(6, i), a6[i]));
    CHECK(same(a_m16k16(31, i), a31[i]));
  }
  const RowCol b0[4] = {{0, 0}, {1, 0}, {8, 0}, {9, 0}};
  const RowCol b31[4] = {{6, 7}, {7, 7}, {14, 7}, {15, 7}};
  const RowCol c0[4] = {{0, 0}, {0, 1}, {8, 0}, {8, 1}};
  const RowCol c31[4] = {{7, 6}, {7, 7}, {15, 6}, {15, 7}};
  for (int i = 0; i < 4; ++i) {
    CHECK(same(b_k16n8(0, i), b0[i]));
    CHECK(same(b_k16n8(31, i), b31[i]));
    CHECK(same(c_m16n8(0, i), c0[i]));
    CHECK(same(c_m16n8(31, i), c31[i]));
  }
  // Each operand's elements are spread over the warp without gaps or overlaps.
  const auto covers = [](auto where, int per_lane, int rows, int cols) {
    std::set<std::pair<int, int>> seen;
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < per_lane; ++i) {
        const RowCol rc = where(lane, i);
        if (rc.row < 0 || rc.row >= rows || rc.col < 0 || rc.col >= cols) return false;
        seen.insert({rc.row, rc.col});
      }
    }
    return int(seen.size()) == rows * cols;
  };
  CHECK(covers(a_m16k16, 8, 16, 16));
  CHECK(covers(b_k16n8, 4, 16, 8));
  CHECK(covers(c_m16n8, 4, 16, 8));
}

TEST_CASE("mma fragments: a row of S lives in one quad, and S's C fragments are P's A fragment") {
  using namespace common::mma;
  for (int lane = 0; lane < 32; ++lane) {
    for (int other = 0; other < 32; ++other) {
      for (int i = 0; i < 4; ++i) {
        for (int k = 0; k < 4; ++k) {
          // Two lanes share a row of C only when they differ in lane bits 0 and 1 alone.
          if (c_m16n8(lane, i).row == c_m16n8(other, k).row) REQUIRE((lane ^ other) < 4);
        }
      }
    }
    // S = Q_i K_jᵀ as two 16×8 tiles (keys 0..7, 8..15); P̃ as one 16×16 A operand.
    for (int i = 0; i < 8; ++i) {
      const RowCol s = c_m16n8(lane, i % 4);
      REQUIRE(same(a_m16k16(lane, i), RowCol{s.row, s.col + 8 * (i / 4)}));
    }
  }
}

TEST_CASE("ldmatrix.x4: the quadrant addresses deliver Q's A fragment, K's B fragments, and with .trans V's") {
  using namespace common::mma;
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r) {  // register r comes from the matrix whose rows lanes 8r..8r+7 addressed
      for (int h = 0; h < 2; ++h) {
        const RowCol q = ldmatrix_m8n8(lane, h, false);
        const RowCol qa = ldmatrix_x4_address(8 * r + q.row);
        REQUIRE(same(RowCol{qa.row, qa.col + q.col}, a_m16k16(lane, 2 * r + h)));
        // V_j is keys × d, row-major: B for O += P̃ V_j, 16 keys by two 8-column halves.
        const RowCol v = ldmatrix_m8n8(lane, h, true);
        const RowCol va = ldmatrix_x4_address(8 * r + v.row);
        const RowCol b = b_k16n8(lane, 2 * (r % 2) + h);
        REQUIRE(same(RowCol{va.row, va.col + v.col}, RowCol{b.row, b.col + 8 * (r / 2)}));
        // K_j is keys × d, row-major: B = K_jᵀ for S = Q_i K_jᵀ, two 8-key tiles.
        const RowCol ka = ldmatrix_x4_address_nk(8 * r + q.row);
        const RowCol kb = b_k16n8(lane, 2 * (r % 2) + h);  // B[k][n] = K_j[n][k]
        REQUIRE(same(RowCol{ka.row, ka.col + q.col}, RowCol{kb.col + 8 * (r / 2), kb.row}));
      }
    }
  }
}
