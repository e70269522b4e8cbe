/// \file step24_dynamic_scheduler/test_scheduler.cpp
/// \brief The tile scheduler as arithmetic, on the CPU: every work tile is taken once, in
/// the order promised, and the dynamic scheduler balances causal tiles at least as well
/// as the static one. The blocks are simulated: each takes its first tile, and the block
/// that finishes first (its tiles' costs added up) takes the next.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <queue>
#include <tuple>
#include <utility>
#include <vector>

#include "tile_scheduler.hpp"

using step24::TileScheduler;
using step24::WorkTile;

namespace {

/// The shapes the tests run: T_r, B·H, G (132: an H100's SMs), both orders.
std::vector<TileScheduler> schedulers(bool dynamic) {
  std::vector<TileScheduler> all;
  for (const auto& [Tr, bh, grid] : std::vector<std::tuple<int, int, int>>{{1, 1, 132},
                                                                           {1, 7, 132},
                                                                           {3, 1, 2},
                                                                           {6, 64, 132},
                                                                           {22, 64, 132},
                                                                           {86, 4, 132},
                                                                           {5, 1000, 132},
                                                                           {128, 16, 1}}) {
    for (bool longest_first : {false, true}) all.push_back({Tr, bh, std::min(grid, Tr * bh), longest_first, dynamic});
  }
  return all;
}

/// A causal tile's cost: query tile i sees i + 1 K/V tiles (B_r = B_c); full attention's: T_r.
int64_t cost(const TileScheduler& s, int n, bool causal) { return causal ? s.at(n).i + 1 : s.Tr; }

/// Runs the blocks of `s` to the end. Returns the tile numbers in the order they were
/// taken (ties: the lower block first) and the time the last block finishes.
std::pair<std::vector<int>, int64_t> simulate(const TileScheduler& s, bool causal) {
  using Event = std::pair<int64_t, int>;  // (time the block is free, block)
  std::priority_queue<Event, std::vector<Event>, std::greater<>> free_at;
  std::vector<int> current(s.grid), taken;
  int claimed = 0;  // the counter's value
  int64_t end = 0;
  for (int b = 0; b < s.grid; ++b) {  // every block's first tile is its own number
    current[b] = b;
    taken.push_back(b);
    free_at.push({cost(s, b, causal), b});
  }
  while (!free_at.empty()) {
    const auto [time, b] = free_at.top();
    free_at.pop();
    end = std::max(end, time);
    const int n = s.next(current[b], s.dynamic ? claimed++ : 0);
    if (n >= s.tiles()) continue;
    current[b] = n;
    taken.push_back(n);
    free_at.push({time + cost(s, n, causal), b});
  }
  return {taken, end};
}

}  // namespace

TEST_CASE("step24 scheduler: tile numbers name every (head, query tile) once, in the promised order") {
  for (const TileScheduler& s : schedulers(false)) {
    CAPTURE(s.Tr);
    CAPTURE(s.batch_heads);
    CAPTURE(s.longest_first);
    std::vector<int> seen(size_t(s.tiles()), 0);
    for (int n = 0; n < s.tiles(); ++n) {
      const WorkTile w = s.at(n);
      REQUIRE(w.bh >= 0);
      REQUIRE(w.bh < s.batch_heads);
      REQUIRE(w.i >= 0);
      REQUIRE(w.i < s.Tr);
      ++seen[size_t(w.bh) * s.Tr + w.i];
      if (n == 0) continue;
      const WorkTile before = s.at(n - 1);
      if (s.longest_first) {
        CHECK(w.i <= before.i);  // the longest tiles of every head first
      } else {
        CHECK(w.bh >= before.bh);  // head by head ...
        if (w.bh == before.bh) CHECK(w.i == before.i - 1);  // ... each head's longest first
      }
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
  }
}

TEST_CASE("step24 scheduler: static and dynamic hand out every tile once") {
  for (bool dynamic : {false, true}) {
    for (const TileScheduler& s : schedulers(dynamic)) {
      CAPTURE(dynamic);
      CAPTURE(s.Tr);
      CAPTURE(s.batch_heads);
      CAPTURE(s.grid);
      std::vector<int> taken = simulate(s, /*causal=*/dynamic).first;
      REQUIRE(taken.size() == size_t(s.tiles()));
      if (dynamic) CHECK(std::is_sorted(taken.begin(), taken.end()));  // claimed in the order of the numbers
      std::sort(taken.begin(), taken.end());
      for (int n = 0; n < s.tiles(); ++n) REQUIRE(taken[size_t(n)] == n);
    }
  }
}

TEST_CASE("step24 scheduler: static blocks take tiles b, b + G, b + 2G, ...") {
  const TileScheduler s{10, 30, 132, false, false};
  int n = 7, count = 0;
  for (; n < s.tiles(); n = s.next(n, 0)) {
    CHECK(n % s.grid == 7);
    ++count;
  }
  CHECK(count == (s.tiles() - 7 + s.grid - 1) / s.grid);
}

TEST_CASE("step24 scheduler: causal tiles, longest first, finish no later dynamically than statically") {
  for (const TileScheduler& s : schedulers(true)) {
    CAPTURE(s.Tr);
    CAPTURE(s.batch_heads);
    CAPTURE(s.grid);
    CAPTURE(s.longest_first);
    TileScheduler fixed = s;
    fixed.dynamic = false;
    const int64_t dynamic_end = simulate(s, true).second, static_end = simulate(fixed, true).second;
    // Longest first, greedy is LPT scheduling; head by head it can lose a little to the
    // static stride (5 × 1000 tiles on 132 blocks: 117 against 116), but keeps the bound below.
    if (s.longest_first) CHECK(dynamic_end <= static_end);
    // Greedy list scheduling: never later than the average load plus the longest tile.
    int64_t total = 0;
    for (int n = 0; n < s.tiles(); ++n) total += cost(s, n, true);
    CHECK(dynamic_end <= (total + s.grid - 1) / s.grid + s.Tr);
  }
}
