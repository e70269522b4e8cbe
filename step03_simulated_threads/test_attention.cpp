/// \file step03_simulated_threads/test_attention.cpp
/// \brief step03's tests: conformance, fixtures, and the simulator's counters against the closed form.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "attention.hpp"
#include "common/io_complexity.hpp"
#include "common/testing.hpp"

namespace {

common::Options with_budget(int64_t sram_floats) {
  common::Options o;
  o.sram_floats = sram_floats;
  return o;
}

std::map<std::string, double> extras(const common::Result& r) {
  return std::map<std::string, double>(r.extra.begin(), r.extra.end());
}

}  // namespace

TEST_CASE("step03: conformance suite at the default budget") {
  common::testing::check_conformance(step03::describe());
}

TEST_CASE("step03: conformance suite with small tiles (M = 1000, many tails)") {
  // B_c = ceil(1000 / 4d): 4 at d = 64, 250 at d = 1. Every length gets ragged tiles,
  // and a block passes many barriers; N <= 257 keeps the run short.
  common::testing::check_conformance(step03::describe(), 257, with_budget(1000));
}

TEST_CASE("step03: named fixtures with the budgets their sources used") {
  common::testing::check_fixture(step03::describe(), common::hand_worked_example());
  common::testing::check_fixture(step03::describe(), common::two_by_two_m9());
  common::testing::check_fixture(step03::describe(), common::seed002_n16_d8());
}

TEST_CASE("step03: more rows than threads — thread tx owns rows tx, tx + 128, ...") {
  // d = 160 and M = 2^17 give B_r = 160 > kMaxThreads = 128.
  const common::Problem p =
      common::make_random_problem(common::Shape{1, 1, 300, 50, 160}, true, 0.0f, common::testing::run_seed());
  const auto t = common::algorithm1_tiles(int64_t{1} << 17, p.shape);
  REQUIRE(t.Br > step03::kMaxThreads);
  common::testing::check_problem(step03::describe(), p, with_budget(int64_t{1} << 17));
}

TEST_CASE("step03: counted global traffic equals the closed form of Algorithm 1") {
  for (int64_t M : {1, 64, 1000, 4096, 1 << 14}) {
    for (const common::Shape& s : {common::Shape{1, 1, 100, 100, 8}, common::Shape{2, 3, 17, 257, 32},
                                   common::Shape{1, 2, 200, 33, 64}}) {
      CAPTURE(M);
      CAPTURE(common::describe(s));
      const common::Problem p = common::make_random_problem(s, false, 0.0f, 3);
      const common::Result r = step03::attention_forward(p, with_budget(M));
      REQUIRE(r.traffic.has_value());
      const common::Algorithm1Tiles t = common::algorithm1_tiles(M, s);
      const common::Traffic closed = common::algorithm1_traffic(s, t);
      CHECK(r.traffic->hbm_read_bytes == closed.hbm_read_bytes);
      CHECK(r.traffic->hbm_write_bytes == closed.hbm_write_bytes);

      // Per tensor: K and V are read once; Q once per K/V tile; O is written
      // once to initialise it and once per K/V tile.
      const auto x = extras(r);
      const double bh = double(s.batch_heads()), nq = double(s.seq_q), nkv = double(s.seq_kv),
                   d = double(s.head_dim), Tc = double(t.Tc);
      CHECK(x.at("K_read_bytes") == 4 * bh * nkv * d);
      CHECK(x.at("V_read_bytes") == 4 * bh * nkv * d);
      CHECK(x.at("Q_read_bytes") == 4 * bh * Tc * nq * d);
      CHECK(x.at("O_write_bytes") == 4 * bh * (Tc + 1) * nq * d);
      CHECK(x.at("L_write_bytes") == 4 * bh * nq);
      // Barriers: one after the initialisation, one per K/V tile, three per (j, i).
      CHECK(x.at("barriers") == bh * (1 + Tc + 3 * Tc * double(t.Tr)));
    }
  }
}

TEST_CASE("step03: shared traffic — each score reads a row of Q_i and of K_j") {
  const common::Shape s{1, 1, 64, 64, 16};
  const common::Problem p = common::make_random_problem(s, false, 0.0f, 4);
  const common::Result r = step03::attention_forward(p, with_budget(4 * 16 * 16));  // B_c = B_r = 16
  const auto x = extras(r);
  const double n = 64, d = 16, Tc = 4;
  // Reads: S (2 N² d), P̃ (N²), P̃V (2 N² d), O_i and l_i, m_i for line 12 and the
  // write-back (2 N d + 4 N per K/V tile).
  CHECK(x.at("smem_read_bytes") == 4 * (2 * n * n * d + n * n + 2 * n * n * d + Tc * (2 * n * d + 4 * n)));
  // Writes: K_j, V_j (2 N d), per K/V tile Q_i, O_i, l_i, m_i loaded and O_i, l_i,
  // m_i updated (3 N d + 4 N), S then P̃ (2 N²).
  CHECK(x.at("smem_write_bytes") == 4 * (2 * n * d + Tc * (3 * n * d + 4 * n) + 2 * n * n));
}
