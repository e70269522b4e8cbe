/// \file fixtures.cpp
/// \brief Seeded inputs, named fixtures and the conformance shape list.
#include "common/fixtures.hpp"

#include <cmath>

namespace common {

namespace {

// SplitMix64: tiny, fast, and the same on every platform (unlike the
// distributions of <random>, whose output is implementation-defined).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1) with 24 random bits: exactly representable in float.
float uniform_pm1(uint64_t& state) {
  const auto bits = static_cast<int32_t>(splitmix64(state) >> 40);  // [0, 2^24)
  return static_cast<float>(bits - (1 << 23)) / static_cast<float>(1 << 23);
}

void fill(std::vector<float>& t, int64_t n, float amplitude, uint64_t& state) {
  t.resize(static_cast<size_t>(n));
  for (float& x : t) x = amplitude * uniform_pm1(state);
}

}  // namespace

Problem make_random_problem(const Shape& shape, bool causal, std::optional<float> scale, uint64_t seed,
                            float qk_amplitude) {
  validate(shape);
  Problem p;
  p.shape = shape;
  p.causal = causal;
  p.scale = scale ? *scale : default_scale(shape.head_dim);
  uint64_t state = seed;
  fill(p.q, shape.q_elements(), qk_amplitude, state);
  fill(p.k, shape.kv_elements(), qk_amplitude, state);
  fill(p.v, shape.kv_elements(), 1.0f, state);
  return p;
}

std::vector<float> make_random_upstream(const Shape& shape, uint64_t seed) {
  validate(shape);
  constexpr uint64_t kUpstreamStream = 0xD0D0D0D0D0D0D0D0ull;  // not Q, K and V's stream
  uint64_t state = seed ^ kUpstreamStream;
  std::vector<float> d_o;
  fill(d_o, shape.q_elements(), 1.0f, state);
  return d_o;
}

float amplitude_for_score_magnitude(double magnitude, int64_t head_dim, float scale) {
  // s = scale * sum_k q_k k_k with q, k uniform in [-a, a]: the sum has standard
  // deviation a^2 sqrt(d) / 3, so a = sqrt(3 |s| / (scale sqrt(d))).
  const double d = static_cast<double>(head_dim);
  return static_cast<float>(std::sqrt(3.0 * magnitude / (std::abs(scale) * std::sqrt(d))));
}

namespace {

Problem single_head(int64_t n, int64_t d, std::vector<float> q, std::vector<float> k, std::vector<float> v) {
  Problem p;
  p.shape = Shape{1, 1, n, n, d};
  p.scale = default_scale(d);
  p.q = std::move(q);
  p.k = std::move(k);
  p.v = std::move(v);
  return p;
}

}  // namespace

Fixture hand_worked_example() {
  Fixture f;
  f.name = "hand_worked_n2_d1";
  f.source = "FlashAttention-1 notebook: N=2, d=1 worked by hand";
  f.problem = single_head(2, 1, {1, 1}, {0, 2}, {0, -1});
  f.sram_floats = 2;
  // softmax([0, 2]) . [0, -1] = -e^2 / (1 + e^2) = -0.8808 in both rows.
  const float o = static_cast<float>(-std::exp(2.0) / (1.0 + std::exp(2.0)));
  f.expected_o = {o, o};
  f.expected_tolerance = 1e-6;
  return f;
}

Fixture two_by_two_m9() {
  Fixture f;
  f.name = "two_by_two_m9";
  f.source = "FlashAttention-1 notebook: the 2x2 case that broke a first attempt, M = 9";
  f.problem = single_head(2, 2, {1, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0});
  f.sram_floats = 9;
  // Row 0 scores [1/sqrt2, 0]: weights e^(1/sqrt2) and 1 over V rows [0,1], [0,0].
  const double w = std::exp(1.0 / std::sqrt(2.0));
  const auto o01 = static_cast<float>(w / (w + 1.0));
  // Row 1 scores [0, 0]: equal weights, O = [0, 0.5].
  f.expected_o = {0.0f, o01, 0.0f, 0.5f};
  f.expected_tolerance = 1e-6;
  return f;
}

Fixture seed002_n16_d8() {
  Fixture f;
  f.name = "seed002_n16_d8";
  f.source = "FlashAttention-2 notebook: N=16, d=8, B_r=4";
  f.problem = make_random_problem(Shape{1, 1, 16, 16, 8}, false, std::nullopt, 456);
  f.sram_floats = 128;  // B_c = ceil(128 / 32) = 4, B_r = min(4, 8) = 4
  return f;
}

std::vector<Shape> seed004_shapes() {
  // (N_kv, N_q) pairs from the Torch/Numba/CUDA notebook, at d = 128.
  return {Shape{1, 1, 32, 32, 128}, Shape{1, 1, 64, 128, 128}, Shape{1, 1, 512, 512, 128}, Shape{1, 1, 1024, 512, 128}};
}

std::vector<ConformanceCase> conformance_cases(const std::vector<int64_t>& head_dims, int64_t max_seq) {
  std::vector<ConformanceCase> all;
  auto add = [&](std::string name, Shape s, bool causal, std::optional<float> scale = std::nullopt,
                 double magnitude = 0.0) {
    all.push_back(ConformanceCase{std::move(name), s, causal, scale, magnitude});
  };
  // Every sequence length of the list, square, at d = 64, both masks.
  for (int64_t n : {1, 2, 15, 16, 17, 31, 33, 100, 257, 1000}) {
    for (bool causal : {false, true}) {
      add("N=" + std::to_string(n) + (causal ? " causal" : ""), Shape{1, 2, n, n, 64}, causal);
    }
  }
  // Every head dimension, with lengths that are not tile multiples.
  for (int64_t d : {1, 8, 32, 80, 96, 128}) {
    add("d=" + std::to_string(d), Shape{2, 1, 33, 100, d}, false);
    add("d=" + std::to_string(d) + " causal", Shape{1, 2, 100, 33, d}, true);
  }
  // N_q != N_kv both ways, causal and not (causal is top-left aligned).
  add("N_q<N_kv", Shape{1, 2, 17, 257, 64}, false);
  add("N_q<N_kv causal", Shape{1, 2, 17, 257, 64}, true);
  add("N_q>N_kv", Shape{2, 1, 257, 31, 128}, false);
  add("N_q>N_kv causal", Shape{2, 1, 257, 31, 128}, true);
  add("N_q=1000 N_kv=100 causal d=32", Shape{1, 2, 1000, 100, 32}, true);
  // B*H > 1 with several of each.
  add("B=2 H=3", Shape{2, 3, 100, 100, 32}, false);
  add("B=3 H=2 causal", Shape{3, 2, 31, 31, 96}, true);
  // Large scores |s| ~ 1e3: a kernel without the running max overflows exp.
  add("|s|~1e3", Shape{1, 2, 100, 100, 64}, false, std::nullopt, 1e3);
  add("|s|~1e3 causal d=128", Shape{1, 2, 257, 257, 128}, true, std::nullopt, 1e3);
  // A non-default scale.
  add("scale=0.5", Shape{1, 2, 100, 257, 64}, false, 0.5f);
  add("scale=0.03 causal", Shape{1, 2, 257, 100, 32}, true, 0.03f);
  // Any finite scale is valid, as in PyTorch's SDPA: a negative one favours
  // the keys least like the query; zero makes every visible key equally likely.
  add("scale=-0.7", Shape{1, 2, 100, 33, 64}, false, -0.7f);
  add("scale=-0.2 causal", Shape{2, 1, 33, 100, 128}, true, -0.2f);
  add("scale=0", Shape{1, 1, 17, 31, 32}, false, 0.0f);

  std::vector<ConformanceCase> kept;
  for (const ConformanceCase& c : all) {
    bool dim_ok = head_dims.empty();
    for (int64_t d : head_dims) dim_ok = dim_ok || d == c.shape.head_dim;
    const bool len_ok = max_seq == 0 || (c.shape.seq_q <= max_seq && c.shape.seq_kv <= max_seq);
    if (dim_ok && len_ok) kept.push_back(c);
  }
  return kept;
}

Problem make_problem(const ConformanceCase& c, uint64_t seed) {
  const float scale = c.scale ? *c.scale : default_scale(c.shape.head_dim);
  const float amplitude =
      c.score_magnitude > 0 ? amplitude_for_score_magnitude(c.score_magnitude, c.shape.head_dim, scale) : 1.0f;
  return make_random_problem(c.shape, c.causal, scale, seed, amplitude);
}

}  // namespace common
