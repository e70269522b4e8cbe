/// \file step03_simulated_threads/test_checker.cpp
/// \brief The simulator's checks at work: the real kernel with a planted bug, each reported by the right check.
///
/// Each bugs/NAME.patch plants one bug in attention.cpp; the build applies it to
/// a copy of the kernel file, in namespace step03::bugs::NAME (see
/// CMakeLists.txt), so the tests below run the real kernel, never a hand copy
/// that could drift from it. A patch that no longer applies fails the build.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention.hpp"
#include "common/fixtures.hpp"
#include "common/testing.hpp"
#include "simulator.hpp"

// The kernels of bugs/*.patch, each built from attention.cpp with its patch applied.
namespace step03::bugs {
#define STEP03_PLANTED_BUG(NAME)                                                                    \
  namespace NAME {                                                                                  \
  common::Result attention_forward(const common::Problem& problem, const common::Options& options); \
  }
STEP03_PLANTED_BUG(missing_barrier)
STEP03_PLANTED_BUG(overlapping_views)
STEP03_PLANTED_BUG(tail_off_by_one)
STEP03_PLANTED_BUG(barrier_in_branch)
STEP03_PLANTED_BUG(l_m_not_loaded)
#undef STEP03_PLANTED_BUG
}  // namespace step03::bugs

namespace {

using step03::sim::Check;
using step03::sim::CheckFailed;
namespace sim = step03::sim;
namespace bugs = step03::bugs;

/// The problem where every planted bug shows, as in the page's exercises:
/// N_q = 20, N_kv = 37, d = 8, one head, M = 256, so B_c = B_r = 8, 64 threads,
/// and the last Q and K/V tiles are short (4 and 5 rows).
common::Problem exercise_problem(bool causal, uint64_t seed) {
  return common::make_random_problem(common::Shape{1, 1, 20, 37, 8}, causal, std::nullopt, seed);
}

/// Options with the exercises' budget M = 256.
common::Options exercise_options() {
  common::Options o;
  o.sram_floats = 256;
  return o;
}

/// Runs `forward` (a planted kernel) on the exercises' problem and returns its finding.
CheckFailed run_expecting_a_finding(common::Result (*forward)(const common::Problem&, const common::Options&)) {
  try {
    forward(exercise_problem(false, 7), exercise_options());
  } catch (const CheckFailed& e) {
    return e;
  }
  FAIL("the planted bug was not reported");
  throw std::logic_error("unreachable");
}

/// The report names the buffer, the index, the threads and the barrier phase.
void check_report(const CheckFailed& e, Check check, const std::string& buffer) {
  const sim::Finding& f = e.finding();
  const std::string what = e.what();
  INFO(what);
  CHECK(f.check == check);
  CHECK(f.buffer == buffer);
  CHECK(f.block == "(0,0,0)");
  CHECK(!f.threads.empty());
  CHECK(what.find(sim::to_string(check)) == 0);
  CHECK(what.find("block (0,0,0)") != std::string::npos);
  CHECK(what.find("thread") != std::string::npos);
  CHECK(what.find(f.threads.front()) != std::string::npos);
  CHECK(what.find("barrier phase " + std::to_string(f.phase)) != std::string::npos);
  if (!buffer.empty()) CHECK(what.find(buffer + "[" + std::to_string(f.index) + "]") != std::string::npos);
}

/// The largest `x` of the warp's 32 lanes, in every lane (warp_max of attention.cpp).
__device__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

/// The sum of `x` over the warp's 32 lanes, in every lane (warp_sum of attention.cpp).
__device__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

/// What `run()` prints on stderr.
template <class Run>
std::string stderr_of(Run run) {
  std::fflush(stderr);
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  const int saved = dup(STDERR_FILENO);
  dup2(fileno(file), STDERR_FILENO);
  run();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::rewind(file);
  std::string text;
  char chunk[256];
  for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, file)) > 0;) text.append(chunk, n);
  std::fclose(file);
  return text;
}

/// Launches `kernel` on one block of `threads` threads and returns its finding.
template <class Kernel>
CheckFailed launch_expecting_a_finding(int threads, Kernel kernel) {
  sim::Device device;
  try {
    device.launch(sim::dim3(1), sim::dim3(unsigned(threads)), 0, kernel);
  } catch (const CheckFailed& e) {
    return e;
  }
  FAIL("not reported");
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("step03 checker: the kernel without a planted bug passes where the bugs show") {
  REQUIRE(step03::threads_per_block() == 64);
  common::testing::check_problem(step03::describe(), exercise_problem(true, common::testing::run_seed()),
                                 exercise_options());
  common::testing::check_problem(step03::describe(), exercise_problem(false, 7), exercise_options());
}

TEST_CASE("step03 checker: bugs/missing_barrier.patch, a deleted barrier, is a shared-memory race") {
  const CheckFailed e = run_expecting_a_finding(bugs::missing_barrier::attention_forward);
  // After Q tile 0, faster threads load the next O_i (line 8) while slower ones
  // still read and write O_i in line 12: the same barrier phase, no barrier between.
  check_report(e, Check::shared_race, "Oi");
  CHECK(e.finding().threads.size() == 2);
  CHECK(e.finding().threads[0] != e.finding().threads[1]);
}

TEST_CASE(
    "step03 checker: bugs/overlapping_views.patch, the FlashAttention-1 notebook's `Bc + ld` for `Bc * ld`, makes V_j "
    "overlap K_j") {
  const CheckFailed e = run_expecting_a_finding(bugs::overlapping_views::attention_forward);
  check_report(e, Check::overlapping_buffers, "Vj");
  // ld = d + 1 = 9: K_j is [0, 72), V_j starts at B_c + ld = 17.
  CHECK(std::string(e.what()).find("shared array Vj [17, 89) overlaps Kj [0, 72)") != std::string::npos);
  CHECK(std::string(e.what()).find("Vj[0] is Kj[17]") != std::string::npos);
}

TEST_CASE("step03 checker: bugs/tail_off_by_one.patch, an off-by-one tail guard, reads past the end of Q") {
  const CheckFailed e = run_expecting_a_finding(bugs::tail_off_by_one::attention_forward);
  // load_tile's guard lets one row too many through. The first tile to overrun is
  // the last Q tile of j = 0: rows 16..19 of Q, and row 20 = N_q is read.
  check_report(e, Check::out_of_bounds, "Q");
  CHECK(e.finding().index >= 20 * 8);  // an element of row 20, whichever thread got there first
  CHECK(e.finding().index < 21 * 8);
  CHECK(std::string(e.what()).find("is past the end of Q (160 elements)") != std::string::npos);

  // As on a GPU, a pointer's bounds are its tensor's, not its head's: with two
  // heads, block 0 reads row 0 of head 1 unnoticed, and block 1 is reported.
  common::Problem two_heads = common::make_random_problem(common::Shape{1, 2, 20, 37, 8}, false, std::nullopt, 7);
  try {
    bugs::tail_off_by_one::attention_forward(two_heads, exercise_options());
    FAIL("not reported");
  } catch (const CheckFailed& e2) {
    INFO(std::string(e2.what()));
    CHECK(e2.finding().block == "(1,0,0)");
    CHECK(e2.finding().index >= 160 + 20 * 8);  // row 20 of a pointer to head 1: past the tensor's end
    CHECK(e2.finding().index < 160 + 21 * 8);
    CHECK(std::string(e2.what()).find("is past the end of Q (320 elements): index ") != std::string::npos);
    CHECK(std::string(e2.what()).find(" from a pointer to Q[160]") != std::string::npos);
  }
}

TEST_CASE("step03 checker: bugs/barrier_in_branch.patch, a barrier only lane 0 reaches, is divergence, not a hang") {
  const CheckFailed e = run_expecting_a_finding(bugs::barrier_in_branch::attention_forward);
  // Lane 0 of each warp waits at the planted barrier; the other 31 lanes go on
  // to the next row's warp_max and wait there for lane 0: nobody can move.
  check_report(e, Check::barrier_divergence, "");
  const std::string what = e.what();
  CHECK(what.find("threads (0,0,0), (32,0,0) wait at the barrier at attention.cpp:") != std::string::npos);
  CHECK(what.find("and 58 more wait at the shuffle at attention.cpp:") != std::string::npos);
  CHECK(e.finding().phase == 3);  // after the barriers of line 2, line 8 and line 9
}

TEST_CASE("step03 checker: bugs/l_m_not_loaded.patch, l_i and m_i never loaded, is an uninitialised read") {
  const CheckFailed e = run_expecting_a_finding(bugs::l_m_not_loaded::attention_forward);
  check_report(e, Check::uninitialised_read, "mi");
  CHECK(e.finding().phase == 3);  // after the barriers of line 2, line 8 and line 9
}

TEST_CASE("step03 checker: a thread that returns early while others wait at a barrier") {
  sim::Device device;
  const auto kernel = [] {
    if (threadIdx.x == 3) return;
    __syncthreads();
  };
  try {
    device.launch(sim::dim3(2), sim::dim3(4), 0, kernel);
    FAIL("not reported");
  } catch (const CheckFailed& e) {
    INFO(e.what());
    CHECK(e.finding().check == Check::barrier_divergence);
    CHECK(std::string(e.what()).find("threads (3,0,0) have left the kernel") != std::string::npos);
    CHECK(std::string(e.what()).find("threads (0,0,0), (1,0,0), (2,0,0) wait at the barrier") != std::string::npos);
  }
}

TEST_CASE("step03 checker: warp shuffles exchange values, count, and are neither barriers nor races") {
  sim::Device device;
  std::vector<float> out(64, 0.0f);
  const auto O = device.global("O", out.data(), 64);
  const auto kernel = [](sim::Ptr<float> o) {
    const int tid = threadIdx.x, lane = tid % warpSize;
    sim::Ptr<float> a = sim::dynamic_shared();
    sim::name(a, "a", 64);
    a[tid] = warp_sum(float(lane)) + warp_max(float(tid));  // 0 + 1 + ... + 31, then the warp's largest tid
    __syncthreads();  // thread t reads what thread 63 - t wrote
    o[tid] = a[63 - tid];
  };
  const sim::Counters c = device.launch(sim::dim3(2), sim::dim3(64), 64 * 4, kernel, O);
  for (int t = 0; t < 64; ++t) CHECK(out[size_t(t)] == 496.0f + (t < 32 ? 63.0f : 31.0f));
  CHECK(c.shuffles == 2 * 2 * 10);  // 2 blocks, 2 warps, 5 + 5 shuffles each
  CHECK(c.barriers == 2);
}

TEST_CASE("step03 checker: a lane that returns while its warp waits in a shuffle") {
  const CheckFailed e = launch_expecting_a_finding(64, [] {
    if (threadIdx.x == 40) return;
    warp_sum(1.0f);
  });
  INFO(e.what());
  CHECK(e.finding().check == Check::barrier_divergence);
  CHECK(std::string(e.what()).find("the threads of warp 1 of block (0,0,0) did not all reach the same shuffle") !=
        std::string::npos);
  CHECK(std::string(e.what()).find("threads (40,0,0) have left the kernel") != std::string::npos);
}

TEST_CASE("step03 checker: lanes of a warp at different shuffles") {
  const CheckFailed e = launch_expecting_a_finding(32, [] {
    if (threadIdx.x < 16) {
      warp_max(1.0f);
    } else {
      warp_sum(1.0f);
    }
  });
  INFO(e.what());
  CHECK(e.finding().check == Check::barrier_divergence);
  CHECK(std::string(e.what()).find("threads (0,0,0), (1,0,0), (2,0,0), (3,0,0) and 12 more wait at the shuffle") !=
        std::string::npos);
  CHECK(e.finding().threads.size() == 2);
}

TEST_CASE("step03 checker: a shuffle in a partial warp, or with a partial mask, is refused") {
  sim::Device device;
  const auto shuffle = [] { warp_sum(1.0f); };
  CHECK_THROWS_WITH_AS(device.launch(sim::dim3(1), sim::dim3(40), 0, shuffle),
                       doctest::Contains("warp 1 of a block of 40 threads has 8 lanes"), std::invalid_argument);
  const auto half = [] { __shfl_xor_sync(0x0000ffffu, 1.0f, 1); };
  CHECK_THROWS_AS(device.launch(sim::dim3(1), sim::dim3(32), 0, half), std::invalid_argument);
  const auto narrow = [] { __shfl_xor_sync(0xffffffffu, 1.0f, 1, 16); };
  CHECK_THROWS_WITH_AS(device.launch(sim::dim3(1), sim::dim3(32), 0, narrow), doctest::Contains("not width 16"),
                       std::invalid_argument);
  // A partial warp that does not shuffle is a valid block.
  CHECK_NOTHROW(device.launch(sim::dim3(1), sim::dim3(40), 0, [] { __syncthreads(); }));
}

TEST_CASE("step03 checker: shared out of bounds, an array too large, and a clean launch's counters") {
  sim::Device device;
  std::vector<float> out(4, 0.0f);
  const auto O = device.global("O", out.data(), 4);
  SUBCASE("an index past a named array") {
    const auto kernel = [](sim::Ptr<float> o) {
      sim::Ptr<float> a = sim::dynamic_shared();
      sim::name(a, "a", 4);
      a[threadIdx.x] = 1.0f;
      __syncthreads();  // a[3] is read by thread 0 below
      o[threadIdx.x] = a[threadIdx.x + 1];
    };
    try {
      device.launch(sim::dim3(1), sim::dim3(4), 16, kernel, O);
      FAIL("not reported");
    } catch (const CheckFailed& e) {
      INFO(e.what());
      CHECK(e.finding().check == Check::out_of_bounds);
      CHECK(e.finding().buffer == "a");
      CHECK(e.finding().index == 4);
      CHECK(e.finding().threads == std::vector<std::string>{"(3,0,0)"});
      CHECK(e.finding().phase == 1);
    }
  }
  SUBCASE("an array that does not fit in the shared memory") {
    const auto kernel = [] {
      sim::Ptr<float> big = sim::dynamic_shared() + 2;
      sim::name(big, "big", 4);
    };
    CHECK_THROWS_WITH_AS(device.launch(sim::dim3(1), sim::dim3(2), 16, kernel),
                         doctest::Contains("shared array big [2, 6) does not fit in the 4-float dynamic shared memory"),
                         CheckFailed);
  }
  SUBCASE("an unnamed access past the shared memory") {
    const auto kernel = [] { sim::dynamic_shared()[4] = 1.0f; };
    CHECK_THROWS_WITH_AS(device.launch(sim::dim3(1), sim::dim3(1), 16, kernel),
                         doctest::Contains("shared smem[4] is outside smem's 4 elements"), CheckFailed);
  }
  SUBCASE("one array named twice with different lengths") {
    const auto kernel = [] {
      sim::Ptr<float> a = sim::dynamic_shared(), b = sim::dynamic_shared();
      sim::name(a, "a", 2);
      sim::name(b, "a", 3);
    };
    CHECK_THROWS_WITH_AS(device.launch(sim::dim3(1), sim::dim3(1), 16, kernel),
                         doctest::Contains("shared array a [0, 3) was named before as a [0, 2)"), CheckFailed);
  }
  SUBCASE("only shared arrays have names") {
    const auto kernel = [](sim::Ptr<float> o) { sim::name(o, "o", 4); };
    CHECK_THROWS_AS(device.launch(sim::dim3(1), sim::dim3(1), 16, kernel, O), std::invalid_argument);
  }
  SUBCASE("a global index past the tensor, from a pointer into it") {
    const auto kernel = [](sim::Ptr<float> o) {
      sim::Ptr<float> p = o + 2;  // CUDA: float* p = o + 2;
      p[threadIdx.x] = 1.0f;
    };
    try {
      device.launch(sim::dim3(1), sim::dim3(3), 0, kernel, O);
      FAIL("not reported");
    } catch (const CheckFailed& e) {
      INFO(e.what());
      CHECK(e.finding().check == Check::out_of_bounds);
      CHECK(e.finding().buffer == "O");
      CHECK(e.finding().index == 4);
      CHECK(std::string(e.what()).find(
                "global O[4] is past the end of O (4 elements): index 2 from a pointer to O[2]") != std::string::npos);
    }
  }
  SUBCASE("a correct kernel: nothing found, everything counted") {
    const auto kernel = [](sim::Ptr<float> o) {
      sim::Ptr<float> a = sim::dynamic_shared();
      sim::name(a, "a", 4);
      a[threadIdx.x] = float(threadIdx.x);
      __syncthreads();  // thread t reads what thread 3 - t wrote
      o[threadIdx.x] = a[3 - threadIdx.x];
    };
    const sim::Counters c = device.launch(sim::dim3(3), sim::dim3(4), 16, kernel, O);
    CHECK(out == std::vector<float>{3, 2, 1, 0});
    CHECK(c.barriers == 3);
    CHECK(c.smem_read_bytes == 3 * 16);
    CHECK(c.smem_write_bytes == 3 * 16);
    CHECK(c.global_write_bytes() == 3 * 16);
    CHECK(c.global_read_bytes() == 0);
  }
}

TEST_CASE("step03 checker: checked pointers do what float* does") {
  sim::Device device;
  std::vector<float> out(8, 0.0f);
  const std::vector<float> in = {10, 11, 12, 13};
  const auto O = device.global("O", out.data(), 8);
  const auto I = device.global("I", in);
  const auto kernel = [](sim::Ptr<const float> i, sim::Ptr<float> o) {
    sim::Ptr<const float> o_read = o;  // float* converts to const float*
    *o = i[3];
    (2 + o)[1] = *(i + 1);
    (o + 5 - 1)[0] = (i + 4)[-2];
    __syncthreads();  // o[0] was written above, by this block's only thread
    o[7] = o_read[0];
  };
  device.launch(sim::dim3(1), sim::dim3(1), 0, kernel, I, O);
  CHECK(out == std::vector<float>{13, 0, 0, 11, 12, 0, 0, 13});
  CHECK(O.name() == std::string("O"));
  CHECK((O + 3).offset() == 3);
}

TEST_CASE("step03 checker: progress on stderr, moved by the barriers within a block, and only when asked") {
  // One block of 4 threads, 4 barriers 150 ms apart: thread 0's barriers move the
  // bar (at most ten updates a second) before the block ends.
  const auto kernel = [] {
    for (int b = 0; b < 4; ++b) {
      if (threadIdx.x == 0) usleep(150000);
      __syncthreads();
    }
  };
  const std::string shown = stderr_of([&] {
    sim::Device device;
    device.show_progress(true, 4);
    device.launch(sim::dim3(1), sim::dim3(4), 0, kernel);
  });
  CHECK(shown.find("[########............]  40%") != std::string::npos);
  CHECK(shown.find("100%") != std::string::npos);
  const std::string quiet = stderr_of([&] {
    sim::Device device;
    device.show_progress(false, 4);
    device.launch(sim::dim3(1), sim::dim3(4), 0, kernel);
  });
  CHECK(quiet.empty());
}
