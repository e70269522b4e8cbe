/// \file fixtures.hpp
/// \brief Inputs: seeded random problems, the named fixtures, the conformance shape list.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/problem.hpp"

namespace common {

/// Fills Q, K and V with values uniform in [-qk_amplitude, qk_amplitude) for Q and
/// K and [-1, 1) for V, from a small counter-based generator (SplitMix64), so the
/// same seed gives the same tensors on every machine and in every step.
/// No `scale` means the default 1/sqrt(d). Validates `shape` first, so that a
/// shape too large for the contract is refused before anything is allocated.
Problem make_random_problem(const Shape& shape, bool causal, std::optional<float> scale, uint64_t seed,
                            float qk_amplitude = 1.0f);

/// A random upstream gradient dO = ∂loss/∂O for `shape` ((B, H, N_q, d), uniform in
/// [-1, 1)) from `seed`, drawn from a stream of its own: the same seed gives the
/// same Q, K, V as make_random_problem and a dO independent of them.
std::vector<float> make_random_upstream(const Shape& shape, uint64_t seed);

/// The Q/K amplitude that makes scaled scores reach about `magnitude` in size
/// (used for the "large scores" cases: |s| ~ 1e3 must not overflow exp).
float amplitude_for_score_magnitude(double magnitude, int64_t head_dim, float scale);

/// A hand-checkable problem with its known answer.
struct Fixture {
  std::string name;  ///< short name, e.g. "hand_worked_n2_d1"
  std::string source;  ///< where it comes from
  Problem problem;  ///< inputs
  int64_t sram_floats = 0;  ///< the on-chip budget M the source used (0 = any)
  std::vector<float> expected_o;  ///< known O (empty when only the reference is known)
  double expected_tolerance = 0;  ///< how close O must be to expected_o
};

/// The FlashAttention-1 notebook's hand-worked example: N=2, d=1, Q=[1,1], K=[0,2], V=[0,-1], scale 1
/// (d = 1), M = 2 floats so B_r = B_c = 1; O = [-0.88, -0.88] to two places.
Fixture hand_worked_example();

/// The FlashAttention-1 notebook's 2x2 case that broke a first attempt: Q = K = [[1,0],[0,0]],
/// V = [[0,1],[0,0]], M = 9 (B_c = B_r = 2).
Fixture two_by_two_m9();

/// The FlashAttention-2 notebook's case: N=16, d=8, B_r=4 (M = 128 floats gives B_c = 4, B_r = 4).
Fixture seed002_n16_d8();

/// The Torch/Numba/CUDA notebook's (N_kv, N_q) pairs at d = 128: (32,32), (128,64), (512,512), (512,1024).
std::vector<Shape> seed004_shapes();

/// One case of the conformance suite.
struct ConformanceCase {
  std::string name;  ///< readable name, used in test reports
  Shape shape;  ///< sizes
  bool causal = false;  ///< mask
  std::optional<float> scale;  ///< empty = default 1/sqrt(d); any finite value, negative and 0 too
  double score_magnitude = 0;  ///< > 0: Q/K amplitude chosen so |s| reaches this
};

/// The conformance suite of DESIGN.md: N in {1, 2, 15, 16, 17, 31, 33, 100, 257,
/// 1000}, N_q != N_kv, d in {1, 8, 32, 64, 80, 96, 128}, B*H > 1, causal on and
/// off, large scores, a non-default scale. Cases whose d is not in
/// `head_dims` are left out (empty = keep all). `max_seq` drops cases longer than
/// that (0 = keep all), for slow simulators.
std::vector<ConformanceCase> conformance_cases(const std::vector<int64_t>& head_dims = {}, int64_t max_seq = 0);

/// The problem of one conformance case, with inputs drawn from `seed`.
Problem make_problem(const ConformanceCase& c, uint64_t seed);

}  // namespace common
