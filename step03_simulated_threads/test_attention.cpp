/// \file step03_simulated_threads/test_attention.cpp
/// \brief step03's tests: conformance, fixtures, and the simulator's counters against the closed form.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "attention.hpp"
#include "common/io_complexity.hpp"
#include "common/testing.hpp"

namespace {

/// Options with the on-chip budget M = `sram_floats`.
common::Options with_budget(int64_t sram_floats) {
  common::Options o;
  o.sram_floats = sram_floats;
  return o;
}

/// A result's extra fields by name.
std::map<std::string, double> extras(const common::Result& r) {
  return std::map<std::string, double>(r.extra.begin(), r.extra.end());
}

// Under ThreadSanitizer the simulator runs about ten times slower. TSan checks
// the simulator's own synchronisation (barriers, shuffles, shadow words), which
// every case exercises the same way, so there the conformance suite keeps the
// lengths up to 33; the normal build runs it whole.
#if defined(__SANITIZE_THREAD__)
constexpr int64_t kMaxSeq = 33;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr int64_t kMaxSeq = 33;
#else
constexpr int64_t kMaxSeq = 0;
#endif
#else
constexpr int64_t kMaxSeq = 0;
#endif

}  // namespace

TEST_CASE("step03: conformance suite at the default budget") {
  common::testing::check_conformance(step03::describe(), kMaxSeq);
}

TEST_CASE("step03: conformance suite with small tiles (M = 1000, many tails)") {
  // B_c = ceil(1000 / 4d): 4 at d = 64, 250 at d = 1. Every length gets ragged
  // tiles, and a block passes many barriers and shuffles; N <= 100 keeps the run short.
  common::testing::check_conformance(step03::describe(), kMaxSeq > 0 ? kMaxSeq : 100, with_budget(1000));
}

TEST_CASE("step03: named fixtures with the budgets their sources used") {
  common::testing::check_named_fixtures(step03::describe());
}

TEST_CASE("step03: more rows than threads, and a head dimension that is not a multiple of 32") {
  // d = 160 and M = 2^17 give B_r = 160 rows: 3 per thread in line 8, 80 per warp in lines 10-11.
  const common::Problem p =
      common::make_random_problem(common::Shape{1, 1, 300, 50, 160}, true, std::nullopt, common::testing::run_seed());
  REQUIRE(common::algorithm1_tiles(int64_t{1} << 17, p.shape).Br > step03::threads_per_block());
  common::testing::check_problem(step03::describe(), p, with_budget(int64_t{1} << 17));
}

TEST_CASE("step03: counted global traffic equals the closed form of Algorithm 1") {
  // Budgets from one float (B_c = B_r = 1) to the default, with ragged tails;
  // the shapes are kept small where the tiles are, since every row costs ten
  // shuffles of 32 OS threads.
  const std::vector<std::pair<int64_t, common::Shape>> cases = {
      {1, common::Shape{1, 1, 20, 37, 8}},         {64, common::Shape{1, 2, 20, 37, 8}},
      {1000, common::Shape{2, 3, 17, 257, 32}},    {4096, common::Shape{1, 2, 200, 33, 64}},
      {4096, common::Shape{1, 1, 100, 100, 8}},    {1 << 14, common::Shape{1, 1, 100, 100, 8}},
      {1 << 14, common::Shape{2, 3, 17, 257, 32}}, {1 << 14, common::Shape{1, 2, 200, 33, 64}}};
  for (const auto& [M, s] : cases) {
    CAPTURE(M);
    CAPTURE(common::describe(s));
    const common::Problem p = common::make_random_problem(s, false, std::nullopt, 3);
    const common::Result r = step03::attention_forward(p, with_budget(M));
    REQUIRE(r.traffic.has_value());
    const common::Algorithm1Tiles t = common::algorithm1_tiles(M, s);
    const common::Traffic closed = common::algorithm1_traffic(s, t);
    CHECK(r.traffic->hbm_read_bytes == closed.hbm_read_bytes);
    CHECK(r.traffic->hbm_write_bytes == closed.hbm_write_bytes);

    // Per tensor: K and V are read once (the zero rows past N_kv read nothing);
    // Q once per K/V tile; O is written once to initialise it and once per K/V tile.
    const auto x = extras(r);
    const double bh = double(s.batch_heads()), nq = double(s.seq_q), nkv = double(s.seq_kv), d = double(s.head_dim),
                 Tc = double(t.Tc);
    CHECK(x.at("K_read_bytes") == 4 * bh * nkv * d);
    CHECK(x.at("V_read_bytes") == 4 * bh * nkv * d);
    CHECK(x.at("Q_read_bytes") == 4 * bh * Tc * nq * d);
    CHECK(x.at("O_write_bytes") == 4 * bh * (Tc + 1) * nq * d);
    CHECK(x.at("L_write_bytes") == 4 * bh * nq);
    // Barriers: one after the initialisation, four per (j, i). Shuffles: per
    // K/V tile, each row's warp_max and warp_sum, five shuffles each.
    CHECK(x.at("barriers") == bh * (1 + 4 * Tc * double(t.Tr)));
    CHECK(x.at("shuffles") == bh * Tc * nq * 10);
  }
}

TEST_CASE("step03: shared traffic — each score reads a row of Q_i and of K_j") {
  const common::Shape s{1, 1, 64, 64, 16};
  const common::Problem p = common::make_random_problem(s, false, std::nullopt, 4);
  const common::Result r = step03::attention_forward(p, with_budget(4 * 16 * 16));  // B_c = B_r = 16
  const auto x = extras(r);
  const double n = 64, d = 16, Bc = 16, Tc = 4;
  // Reads: S (2 N² d); per K/V tile, lines 10–11 read S_ij twice (2 N B_c) and
  // m_i, l_i twice each (4 N); line 12 reads a row of P̃_ij and a column of V_j
  // plus keep, O_i, add per element (N d (2 B_c + 3)); line 13 l_i^new, m_i^new (2 N).
  CHECK(x.at("smem_read_bytes") == 4 * (2 * n * n * d + Tc * (2 * n * Bc + 4 * n + n * d * (2 * Bc + 3) + 2 * n)));
  // Writes: K_j, V_j (2 N d); per K/V tile Q_i, O_i loaded and O_i updated (3 N d),
  // l_i, m_i loaded and m_i^new, l_i^new, keep, add (6 N); S then P̃ (2 N²).
  CHECK(x.at("smem_write_bytes") == 4 * (2 * n * d + Tc * (3 * n * d + 6 * n) + 2 * n * n));
}
