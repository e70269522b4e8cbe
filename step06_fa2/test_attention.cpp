/// \file step06_fa2/test_attention.cpp
/// \brief step06's tests (GPU): conformance, causal with N_q ≠ N_kv, seed 004's shapes,
/// bitwise-repeatable output, clear errors for bad input.
#include <doctest/doctest.h>

#include "attention.hpp"
#include "common/testing.hpp"

TEST_CASE("step06: conformance suite (fresh random inputs, outputs poisoned)") {
  common::testing::check_conformance(step06::describe());
}

TEST_CASE("step06: causal with N_q != N_kv, across tile boundaries, every d") {
  // Br = 64 query rows per block, Bc = 32 or 64 keys per tile: lengths just off
  // those multiples put the diagonal, the skipped tiles and the tails in every place.
  const uint64_t seed = common::testing::run_seed();
  for (int64_t d : {32, 64, 96, 128}) {
    for (auto [n_q, n_kv] : {std::pair<int64_t, int64_t>{65, 200}, {200, 65}, {127, 129}, {300, 31}, {1, 500},
                             {500, 1}, {64, 64}, {129, 96}}) {
      CAPTURE(d);
      CAPTURE(n_q);
      CAPTURE(n_kv);
      const common::Problem p =
          common::make_random_problem(common::Shape{1, 3, n_q, n_kv, d}, true, 0.0f, seed + n_q * 7 + n_kv);
      common::testing::check_problem(step06::describe(), p);
    }
  }
}

TEST_CASE("step06: seed 004's shapes, causal and not") {
  const uint64_t seed = common::testing::run_seed();
  for (const common::Shape& s : common::seed004_shapes()) {
    for (bool causal : {false, true}) {
      CAPTURE(common::describe(s));
      CAPTURE(causal);
      common::testing::check_problem(step06::describe(), common::make_random_problem(s, causal, 0.0f, seed));
    }
  }
}

TEST_CASE("step06: the same inputs give bitwise identical outputs") {
  // No atomics and a fixed order of every sum: a difference would mean a race.
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const common::Problem p = common::make_random_problem(common::Shape{2, 3, 777, 555, 128}, causal, 0.0f,
                                                          common::testing::run_seed());
    const common::Result first = step06::attention_forward(p);
    for (int run = 0; run < 3; ++run) {
      const common::Result again = step06::attention_forward(p);
      CHECK(again.o == first.o);
      CHECK(again.lse == first.lse);
    }
  }
}

TEST_CASE("step06: bad input gives a clear error") {
  common::Problem p = common::make_random_problem(common::Shape{1, 1, 8, 8, 80}, false, 0.0f, 1);
  CHECK_THROWS_WITH_AS(step06::attention_forward(p), doctest::Contains("head_dim 80"), common::InputError);
  p = common::make_random_problem(common::Shape{1, 1, 8, 8, 64}, false, 0.0f, 1);
  p.k.pop_back();
  CHECK_THROWS_AS(step06::attention_forward(p), common::InputError);
  // 65536 (batch, head) pairs: more than the grid's y dimension holds.
  common::Problem wide = common::make_random_problem(common::Shape{256, 256, 1, 1, 32}, false, 0.0f, 1);
  CHECK_THROWS_WITH_AS(step06::attention_forward(wide), doctest::Contains("65535"), common::InputError);
}

TEST_CASE("step06: --repeat times the kernel, and the resource report has no spills") {
  const common::Problem p = common::make_random_problem(common::Shape{1, 2, 300, 300, 128}, false, 0.0f, 3);
  common::Options o;
  o.repeat = 3;
  const common::Result r = step06::attention_forward(p, o);
  CHECK(r.kernel_ms.size() == 3);
  for (const auto& [name, value] : r.extra) {
    CAPTURE(name);
    if (name == "local_bytes") CHECK(value == 0);
    if (name == "blocks_per_sm") CHECK(value >= 1);
  }
  CHECK(r.peak_bytes == 0);
}
