/// \file step23_persistent/test_scheduler.cpp
/// \brief The static tile scheduler as arithmetic, on the CPU: every work tile is taken once,
/// in the order promised, block b taking b, b + G, b + 2G, …
#include <doctest/doctest.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "tile_scheduler.hpp"

using step23::TileScheduler;
using step23::WorkTile;

namespace {

/// The shapes the tests run: T_r, B·H, G (132: an H100's SMs), both orders.
std::vector<TileScheduler> schedulers() {
  std::vector<TileScheduler> all;
  for (const auto& [Tr, bh, grid] : std::vector<std::tuple<int, int, int>>{{1, 1, 132},
                                                                           {1, 7, 132},
                                                                           {3, 1, 2},
                                                                           {6, 64, 132},
                                                                           {22, 64, 132},
                                                                           {86, 4, 132},
                                                                           {5, 1000, 132},
                                                                           {128, 16, 1}}) {
    for (bool longest_first : {false, true}) all.push_back({Tr, bh, std::min(grid, Tr * bh), longest_first});
  }
  return all;
}

}  // namespace

TEST_CASE("step23 scheduler: tile numbers name every (head, query tile) once, in the promised order") {
  for (const TileScheduler& s : schedulers()) {
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

TEST_CASE("step23 scheduler: the blocks' loops hand out every tile once") {
  for (const TileScheduler& s : schedulers()) {
    CAPTURE(s.Tr);
    CAPTURE(s.batch_heads);
    CAPTURE(s.grid);
    std::vector<int> taken;
    for (int b = 0; b < s.grid; ++b) {
      for (int n = b; n < s.tiles(); n = s.next(n)) taken.push_back(n);
    }
    REQUIRE(taken.size() == size_t(s.tiles()));
    std::sort(taken.begin(), taken.end());
    for (int n = 0; n < s.tiles(); ++n) REQUIRE(taken[size_t(n)] == n);
  }
}

TEST_CASE("step23 scheduler: static blocks take tiles b, b + G, b + 2G, ...") {
  const TileScheduler s{10, 30, 132, false};
  int n = 7, count = 0;
  for (; n < s.tiles(); n = s.next(n)) {
    CHECK(n % s.grid == 7);
    ++count;
  }
  CHECK(count == (s.tiles() - 7 + s.grid - 1) / s.grid);
}
