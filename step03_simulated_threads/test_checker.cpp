/// \file step03_simulated_threads/test_checker.cpp
/// \brief The simulator's checks at work: copies of the kernel with a planted bug, each reported by the right check.
///
/// `planted<bug>` is attention_kernel from attention.cpp, line for line, with
/// one switch per bug; each switch is marked PLANTED. With Bug::none it must
/// compute the right answer, so the copy cannot drift from the kernel unnoticed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "attention.hpp"
#include "common/fixtures.hpp"
#include "common/testing.hpp"

namespace {

using step03::Tiles;
using step03::sim::blockIdx;
using step03::sim::Check;
using step03::sim::CheckFailed;
using step03::sim::shfl_xor_sync;
using step03::sim::syncthreads;
using step03::sim::threadIdx;
using std::min;
namespace sim = step03::sim;

/// The bugs planted in the copy of the kernel.
enum class Bug {
  none,               ///< the kernel as it is
  missing_barrier,    ///< the last barrier of the i loop deleted
  overlapping_views,  ///< seed 000's slip: V_j starts at B_c + ld instead of B_c · ld
  tail_off_by_one,    ///< the K_j/V_j tail guard reads one row too many
  barrier_in_branch,  ///< a barrier inside `if (lane == 0)`, which the other lanes skip
  l_m_not_loaded,     ///< line 8 forgets l_i and m_i
};

// The constants and warp reductions of attention.cpp.
constexpr int kThreads = 64;
constexpr int kWarps = kThreads / 32;
constexpr int kWarpSize = 32;

/// warp_max of attention.cpp.
float warp_max(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x = fmaxf(x, shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

/// warp_sum of attention.cpp.
float warp_sum(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x += shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

/// attention_kernel of attention.cpp with `bug` planted.
template <Bug bug>
void planted(sim::Global<const float> Q_all, sim::Global<const float> K_all, sim::Global<const float> V_all,
             sim::Global<float> O_all, sim::Global<float> l_all, sim::Global<float> m_all, sim::Global<float> L_all,
             int n_q, int n_kv, float scale, bool causal, Tiles T) {
  const int Bc = T.Bc, Br = T.Br, ld = T.ld, d = T.d;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int Tc = (n_kv + Bc - 1) / Bc, Tr = (n_q + Br - 1) / Br;

  // This block's head: Q, O: (N_q, d); K, V: (N_kv, d); l, m, L: (N_q) in global memory.
  const size_t bh = blockIdx.x;
  const auto Q = Q_all.slice(bh * n_q * d, n_q * d);
  const auto K = K_all.slice(bh * n_kv * d, n_kv * d);
  const auto V = V_all.slice(bh * n_kv * d, n_kv * d);
  const auto O = O_all.slice(bh * n_q * d, n_q * d);
  const auto l = l_all.slice(bh * n_q, n_q);
  const auto m = m_all.slice(bh * n_q, n_q);
  const auto L = L_all.slice(bh * n_q, n_q);

  const sim::SharedArena smem = sim::dynamic_shared();  // the block's dynamic shared memory, carved into named views
  const sim::Shared Kj = smem.view("Kj", 0, Bc * ld);                         // K_j: (B_c, d), row stride ld, in shared memory
  const int vj_offset = bug == Bug::overlapping_views ? Kj.offset() + Bc + ld : Kj.offset() + Bc * ld;  // PLANTED
  const sim::Shared Vj = smem.view("Vj", vj_offset, Bc * ld);                 // V_j: (B_c, d), row stride ld
  const sim::Shared Qi = smem.view("Qi", Vj.offset() + Bc * ld, Br * ld);     // Q_i: (B_r, d), row stride ld
  const sim::Shared Oi = smem.view("Oi", Qi.offset() + Br * ld, Br * ld);     // O_i: (B_r, d), row stride ld
  const sim::Shared Sij = smem.view("Sij", Oi.offset() + Br * ld, Br * Bc);   // S_ij, then P̃_ij in place: (B_r, B_c)
  const sim::Shared mi = smem.view("mi", Sij.offset() + Br * Bc, Br);         // m_i: (B_r)
  const sim::Shared li = smem.view("li", mi.offset() + Br, Br);               // l_i: (B_r)
  const sim::Shared mi_new = smem.view("mi_new", li.offset() + Br, Br);       // m_i^new: (B_r)
  const sim::Shared li_new = smem.view("li_new", mi_new.offset() + Br, Br);   // l_i^new: (B_r)
  const sim::Shared keep = smem.view("keep", li_new.offset() + Br, Br);       // diag(l_i^new)⁻¹ diag(l_i) e^(m_i − m_i^new): (B_r)
  const sim::Shared add = smem.view("add", keep.offset() + Br, Br);           // diag(l_i^new)⁻¹ e^(m̃_ij − m_i^new): (B_r)

  // Line 2: O = 0, l = 0, m = −∞ in global memory.
  for (int e = tid; e < n_q * d; e += kThreads) O[e] = 0.0f;
  for (int r = tid; r < n_q; r += kThreads) {
    l[r] = 0.0f;
    m[r] = -INFINITY;
  }
  syncthreads();  // the block's own global writes are visible to all its threads after a barrier

  for (int j = 0; j < Tc; ++j) {  // line 5: K/V tiles, outer loop
    const int kv0 = j * Bc, cols = min(Bc, n_kv - kv0);  // the last tile may be short
    // Line 6: load K_j, V_j from HBM to SRAM. Rows past the end are zero, so the
    // fixed-length loops below multiply zeros there, never stale values.
    for (int e = tid; e < Bc * d; e += kThreads) {
      const int c = e / d, k = e % d;
      const bool inside = bug == Bug::tail_off_by_one ? c <= cols : c < cols;  // PLANTED
      const float zero = 0.0f;
      Kj[c * ld + k] = inside ? K[size_t(kv0 + c) * d + k] : zero;
      Vj[c * ld + k] = inside ? V[size_t(kv0 + c) * d + k] : zero;
    }

    for (int i = 0; i < Tr; ++i) {  // line 7: Q tiles, inner loop
      const int q0 = i * Br, rows = min(Br, n_q - q0);
      // Line 8: load Q_i, O_i, l_i, m_i from HBM to SRAM.
      for (int e = tid; e < rows * d; e += kThreads) {
        const int r = e / d, k = e % d;
        Qi[r * ld + k] = Q[size_t(q0 + r) * d + k];
        Oi[r * ld + k] = O[size_t(q0 + r) * d + k];
      }
      for (int r = tid; r < rows && bug != Bug::l_m_not_loaded; r += kThreads) {  // PLANTED
        li[r] = l[q0 + r];
        mi[r] = m[q0 + r];
      }
      syncthreads();  // K_j, V_j, Q_i, O_i, l_i, m_i complete before anyone reads them

      // Line 9: S_ij = scale · Q_i K_jᵀ. Neighbouring threads compute neighbouring
      // columns of one row: Q_i's row is shared, K_j's rows are different rows.
      // Hidden entries (past N_kv, or above the causal diagonal) are −∞.
      for (int e = tid; e < Br * Bc; e += kThreads) {
        const int r = e / Bc, c = e % Bc;
        float s = -INFINITY;
        if (r < rows && c < cols && !(causal && kv0 + c > q0 + r)) {
          float dot = 0.0f;
          for (int k = 0; k < d; ++k) dot = fmaf(Qi[r * ld + k], Kj[c * ld + k], dot);
          s = scale * dot;
        }
        Sij[r * Bc + c] = s;
      }
      syncthreads();  // all of S_ij is written before a warp reduces a row of it

      // Lines 10–11, one warp per row: m̃_ij = rowmax(S_ij), P̃_ij = exp(S_ij − m̃_ij),
      // l̃_ij = rowsum(P̃_ij); m_i^new, l_i^new; and the two line-12 factors.
      for (int r = warp; r < rows; r += kWarps) {
        float m_tilde = -INFINITY;
        for (int c = lane; c < Bc; c += kWarpSize) m_tilde = fmaxf(m_tilde, Sij[r * Bc + c]);
        m_tilde = warp_max(m_tilde);
        // A causal row can be fully hidden in this tile (m̃_ij = −∞): its P̃ is 0.
        // (Every row sees key 0 in tile j = 0, so m_i is finite from then on.)
        float l_tilde = 0.0f;
        for (int c = lane; c < Bc; c += kWarpSize) {
          const float p = m_tilde == -INFINITY ? 0.0f : expf(Sij[r * Bc + c] - m_tilde);
          Sij[r * Bc + c] = p;
          l_tilde += p;
        }
        l_tilde = warp_sum(l_tilde);
        if (lane == 0) {
          const float m_new = fmaxf(mi[r], m_tilde);
          const float alpha = expf(mi[r] - m_new);   // rescales the old
          const float beta = expf(m_tilde - m_new);  // rescales the new
          const float l_new = alpha * li[r] + beta * l_tilde;
          mi_new[r] = m_new;
          li_new[r] = l_new;
          // Line 12's diagonal factors, formed first: a row with nothing new in
          // this tile gets exactly 1 and 0, so its O_i is not rounded again.
          keep[r] = alpha * li[r] / l_new;
          add[r] = beta / l_new;
          if (bug == Bug::barrier_in_branch) syncthreads();  // PLANTED
        }
      }
      syncthreads();  // P̃_ij and the factors are complete before line 12 reads them

      // Line 12: O_i ← keep · O_i + add · P̃_ij V_j; write O_i back to HBM. A
      // thread owns one element of O_i (step 4: four neighbouring ones, a float4).
      for (int e = tid; e < rows * d; e += kThreads) {
        const int r = e / d, k = e % d;
        float pv = 0.0f;  // (P̃_ij V_j)[r, k]
        for (int c = 0; c < Bc; ++c) {
          const float p = Sij[r * Bc + c];
          const float v = Vj[c * ld + k];
          pv = fmaf(p, v, pv);
        }
        const float o = keep[r] * Oi[r * ld + k] + add[r] * pv;
        Oi[r * ld + k] = o;
        O[size_t(q0 + r) * d + k] = o;
      }
      // Line 13: write l_i^new, m_i^new back to HBM.
      for (int r = tid; r < rows; r += kThreads) {
        l[q0 + r] = li_new[r];
        m[q0 + r] = mi_new[r];
      }
      // Faster threads would otherwise load the next Q_i, O_i (or, after the
      // last i, the next K_j, V_j) over tiles that slower threads still read.
      if (bug != Bug::missing_barrier) syncthreads();  // PLANTED
    }
  }

  // L = m + log(l), kept for the backward pass. The barrier above made every
  // thread's last write of l and m visible.
  for (int r = tid; r < n_q; r += kThreads) L[r] = m[r] + logf(l[r]);
}

/// Runs `kernel` where its bug shows: N_q = 20, N_kv = 37, d = 8, M = 256, so
/// B_c = B_r = 8, 64 threads, and the last Q and K/V tiles are short (4 and 5 rows).
CheckFailed run_expecting_a_finding(step03::Kernel kernel) {
  const common::Problem p = common::make_random_problem(common::Shape{1, 2, 20, 37, 8}, false, 0.0f, 7);
  common::Options o;
  o.sram_floats = 256;
  try {
    step03::run_kernel(kernel, p, o);
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

TEST_CASE("step03 checker: the unbugged copy of the kernel is correct (so the copies test the real kernel)") {
  REQUIRE(step03::threads_per_block() == kThreads);
  const common::Problem p = common::make_random_problem(common::Shape{1, 2, 20, 37, 8}, true, 0.0f,
                                                        common::testing::run_seed());
  common::Options o;
  o.sram_floats = 256;
  common::StepInfo info = step03::describe();
  info.forward = [](const common::Problem& pr, const common::Options& op) {
    return step03::run_kernel(planted<Bug::none>, pr, op);
  };
  common::testing::check_problem(info, p, o);
}

TEST_CASE("step03 checker: a deleted barrier is a shared-memory race") {
  const CheckFailed e = run_expecting_a_finding(planted<Bug::missing_barrier>);
  // After the last Q tile of j = 0, faster threads load V_{j+1} while slower
  // ones still read V_j in line 12.
  check_report(e, Check::shared_race, "Vj");
  CHECK(e.finding().threads.size() == 2);
  CHECK(e.finding().threads[0] != e.finding().threads[1]);
}

TEST_CASE("step03 checker: seed 000's slip, `Bc + ld` for `Bc * ld`, makes V_j overlap K_j") {
  const CheckFailed e = run_expecting_a_finding(planted<Bug::overlapping_views>);
  check_report(e, Check::overlapping_buffers, "Vj");
  CHECK(std::string(e.what()).find("overlaps Kj [0, 96)") != std::string::npos);
}

TEST_CASE("step03 checker: an off-by-one tail guard reads past the end of K") {
  const CheckFailed e = run_expecting_a_finding(planted<Bug::tail_off_by_one>);
  // The last K/V tile has 5 rows (32..36); the guard lets row 37 = N_kv through.
  check_report(e, Check::out_of_bounds, "K");
  CHECK(e.finding().index >= 37 * 8);  // an element of row 37, whichever thread got there first
  CHECK(e.finding().index < 38 * 8);
}

TEST_CASE("step03 checker: a barrier that only lane 0 reaches is divergence, not a hang") {
  const CheckFailed e = run_expecting_a_finding(planted<Bug::barrier_in_branch>);
  // Lane 0 of each warp waits at the planted barrier; the other 31 lanes go on
  // to the next row's warp_max and wait there for lane 0: nobody can move.
  check_report(e, Check::barrier_divergence, "");
  const std::string what = e.what();
  CHECK(what.find("threads (0,0,0), (32,0,0) wait at the barrier at test_checker.cpp:") != std::string::npos);
  CHECK(what.find("and 58 more wait at the shuffle at test_checker.cpp:") != std::string::npos);
  CHECK(e.finding().phase == 3);  // after the barriers of line 2, line 8 and line 9
}

TEST_CASE("step03 checker: l_i and m_i never loaded is an uninitialised read") {
  const CheckFailed e = run_expecting_a_finding(planted<Bug::l_m_not_loaded>);
  check_report(e, Check::uninitialised_read, "mi");
  CHECK(e.finding().phase == 3);  // after the barriers of line 2, line 8 and line 9
}

TEST_CASE("step03 checker: a thread that returns early while others wait at a barrier") {
  sim::Device device;
  const auto kernel = [] {
    if (threadIdx.x == 3) return;
    syncthreads();
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
  const auto kernel = [](sim::Global<float> o) {
    const int tid = threadIdx.x, lane = tid % kWarpSize;
    const sim::Shared a = sim::dynamic_shared().view("a", 0, 64);
    a[tid] = warp_sum(float(lane)) + warp_max(float(tid));  // 0 + 1 + ... + 31, then the warp's largest tid
    syncthreads();  // thread t reads what thread 63 - t wrote
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
  const auto half = [] { shfl_xor_sync(0x0000ffffu, 1.0f, 1); };
  CHECK_THROWS_AS(device.launch(sim::dim3(1), sim::dim3(32), 0, half), std::invalid_argument);
  // A partial warp that does not shuffle is a valid block.
  CHECK_NOTHROW(device.launch(sim::dim3(1), sim::dim3(40), 0, [] { syncthreads(); }));
}

TEST_CASE("step03 checker: shared out of bounds, a view too large, and a clean launch's counters") {
  sim::Device device;
  std::vector<float> out(4, 0.0f);
  const auto O = device.global("O", out.data(), 4);
  SUBCASE("index past a view") {
    const auto kernel = [](sim::Global<float> o) {
      const sim::Shared a = sim::dynamic_shared().view("a", 0, 4);
      a[threadIdx.x] = 1.0f;
      syncthreads();  // a[3] is read by thread 0 below
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
  SUBCASE("a view larger than the arena") {
    const auto kernel = [] { sim::dynamic_shared().view("big", 2, 4); };
    CHECK_THROWS_AS(device.launch(sim::dim3(1), sim::dim3(2), 16, kernel), CheckFailed);
  }
  SUBCASE("a correct kernel: nothing found, everything counted") {
    const auto kernel = [](sim::Global<float> o) {
      const sim::Shared a = sim::dynamic_shared().view("a", 0, 4);
      a[threadIdx.x] = float(threadIdx.x);
      syncthreads();  // thread t reads what thread 3 - t wrote
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
