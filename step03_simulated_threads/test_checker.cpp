/// \file step03_simulated_threads/test_checker.cpp
/// \brief The simulator's checks at work: copies of the kernel with a planted bug, each reported by the right check.
///
/// `planted<bug>` is flash_attention_1 from attention.cpp, line for line, with
/// one switch per bug; each switch is marked PLANTED. With Bug::none it must
/// compute the right answer, so the copy cannot drift from the kernel unnoticed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "attention.hpp"
#include "common/fixtures.hpp"
#include "common/testing.hpp"

namespace {

using step03::sim::blockDim;
using step03::sim::blockIdx;
using step03::sim::Check;
using step03::sim::CheckFailed;
using step03::sim::syncthreads;
using step03::sim::threadIdx;
namespace sim = step03::sim;

enum class Bug {
  none,
  missing_barrier,     // the barrier before the write-back deleted
  overlapping_views,   // seed 000's slip: V_j starts at B_c + d instead of B_c · d
  tail_off_by_one,     // the K_j/V_j tail guard reads one row too many
  barrier_in_branch,   // a barrier inside the rows loop, which idle threads skip
  l_m_not_loaded,      // line 8 forgets l_i and m_i
};

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

template <Bug bug>
void planted(sim::Global<const float> q, sim::Global<const float> k, sim::Global<const float> v, sim::Global<float> o,
             sim::Global<float> l_hbm, sim::Global<float> m_hbm, sim::Global<float> lse, step03::KernelParams p) {
  const int64_t N_q = p.N_q, N_kv = p.N_kv, d = p.d, Bc = p.Bc, Br = p.Br;
  const int64_t tid = threadIdx.x, threads = blockDim.x;
  const int64_t bh = blockIdx.x;
  const auto Q = q.slice(bh * N_q * d, N_q * d);
  const auto K = k.slice(bh * N_kv * d, N_kv * d);
  const auto V = v.slice(bh * N_kv * d, N_kv * d);
  const auto O = o.slice(bh * N_q * d, N_q * d);
  const auto l = l_hbm.slice(bh * N_q, N_q);
  const auto m = m_hbm.slice(bh * N_q, N_q);
  const auto L = lse.slice(bh * N_q, N_q);

  const sim::SharedArena smem = sim::dynamic_shared();
  const sim::Shared Kj = smem.view("Kj", 0, Bc * d);
  const int64_t vj_offset = bug == Bug::overlapping_views ? Bc + d : Bc * d;  // PLANTED
  const sim::Shared Vj = smem.view("Vj", vj_offset, Bc * d);
  const sim::Shared Qi = smem.view("Qi", 2 * Bc * d, Br * d);
  const sim::Shared Oi = smem.view("Oi", 2 * Bc * d + Br * d, Br * d);
  const sim::Shared Sij = smem.view("Sij", 2 * Bc * d + 2 * Br * d, Br * Bc);
  const sim::Shared li = smem.view("li", 2 * Bc * d + 2 * Br * d + Br * Bc, Br);
  const sim::Shared mi = smem.view("mi", 2 * Bc * d + 2 * Br * d + Br * Bc + Br, Br);

  for (int64_t e = tid; e < N_q * d; e += threads) O[e] = 0.0f;
  for (int64_t r = tid; r < N_q; r += threads) {
    l[r] = 0.0f;
    m[r] = kMinusInf;
  }
  syncthreads();

  for (int64_t j = 0; j < p.Tc; ++j) {
    const int64_t kv0 = j * Bc, cols = std::min(Bc, N_kv - kv0);
    for (int64_t e = tid; e < Bc * d; e += threads) {
      const int64_t c = e / d;
      if (bug == Bug::tail_off_by_one ? c <= cols : c < cols) {  // PLANTED
        Kj[e] = K[kv0 * d + e];
        Vj[e] = V[kv0 * d + e];
      }
    }
    syncthreads();

    for (int64_t i = 0; i < p.Tr; ++i) {
      const int64_t q0 = i * Br, rows = std::min(Br, N_q - q0);
      for (int64_t e = tid; e < rows * d; e += threads) {
        Qi[e] = Q[q0 * d + e];
        Oi[e] = O[q0 * d + e];
      }
      for (int64_t r = tid; r < rows && bug != Bug::l_m_not_loaded; r += threads) {  // PLANTED
        li[r] = l[q0 + r];
        mi[r] = m[q0 + r];
      }
      syncthreads();

      for (int64_t r = tid; r < rows; r += threads) {
        float mij = kMinusInf;
        for (int64_t c = 0; c < cols; ++c) {
          float s = kMinusInf;
          if (!p.causal || kv0 + c <= q0 + r) {
            s = 0.0f;
            for (int64_t x = 0; x < d; ++x) s += Qi[r * d + x] * Kj[c * d + x];
            s *= p.scale;
          }
          Sij[r * Bc + c] = s;
          mij = std::max(mij, s);
        }
        if (bug == Bug::barrier_in_branch) syncthreads();  // PLANTED
        float lij = 0.0f;
        for (int64_t c = 0; c < cols; ++c) {
          const float P = mij == kMinusInf ? 0.0f : std::exp(Sij[r * Bc + c] - mij);
          Sij[r * Bc + c] = P;
          lij += P;
        }
        const float m_old = mi[r], l_old = li[r];
        const float mi_new = std::max(m_old, mij);
        const float alpha = std::exp(m_old - mi_new);
        const float beta = std::exp(mij - mi_new);
        const float li_new = alpha * l_old + beta * lij;
        const float keep = alpha * l_old / li_new;
        const float add = beta / li_new;
        for (int64_t x = 0; x < d; ++x) {
          float pv = 0.0f;
          for (int64_t c = 0; c < cols; ++c) pv += Sij[r * Bc + c] * Vj[c * d + x];
          Oi[r * d + x] = keep * Oi[r * d + x] + add * pv;
        }
        li[r] = li_new;
        mi[r] = mi_new;
      }
      if (bug != Bug::missing_barrier) syncthreads();  // PLANTED

      for (int64_t e = tid; e < rows * d; e += threads) O[q0 * d + e] = Oi[e];
      for (int64_t r = tid; r < rows; r += threads) {
        l[q0 + r] = li[r];
        m[q0 + r] = mi[r];
      }
      syncthreads();
    }
  }
  for (int64_t r = tid; r < N_q; r += threads) L[r] = m[r] + std::log(l[r]);
}

/// Runs `kernel` where its bug shows: N_q = 20, N_kv = 37, d = 8, M = 256, so
/// B_c = B_r = 8, 8 threads, and the last Q and K/V tiles are short (4 and 5 rows).
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

}  // namespace

TEST_CASE("step03 checker: the unbugged copy of the kernel is correct (so the copies test the real kernel)") {
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
  // Thread r updates row r of O_i while another thread copies it to global memory.
  check_report(e, Check::shared_race, "Oi");
  CHECK(e.finding().threads.size() == 2);
  CHECK(e.finding().threads[0] != e.finding().threads[1]);
}

TEST_CASE("step03 checker: seed 000's `Bc + d` slip makes V_j overlap K_j") {
  const CheckFailed e = run_expecting_a_finding(planted<Bug::overlapping_views>);
  check_report(e, Check::overlapping_buffers, "Vj");
  CHECK(std::string(e.what()).find("overlaps Kj [0, 64)") != std::string::npos);
}

TEST_CASE("step03 checker: an off-by-one tail guard reads past the end of K") {
  const CheckFailed e = run_expecting_a_finding(planted<Bug::tail_off_by_one>);
  // The last K/V tile has 5 rows (32..36); the guard lets row 37 = N_kv through.
  check_report(e, Check::out_of_bounds, "K");
  CHECK(e.finding().index >= 37 * 8);  // an element of row 37, whichever thread got there first
  CHECK(e.finding().index < 38 * 8);
}

TEST_CASE("step03 checker: a barrier that only some threads reach is divergence, not a hang") {
  const CheckFailed e = run_expecting_a_finding(planted<Bug::barrier_in_branch>);
  // In the last Q tile (4 rows), threads 4..7 own no row and skip the barrier.
  check_report(e, Check::barrier_divergence, "");
  CHECK(std::string(e.what()).find("test_checker.cpp:") != std::string::npos);
  CHECK(e.finding().threads.size() == 2);
}

TEST_CASE("step03 checker: l_i and m_i never loaded is an uninitialised read") {
  const CheckFailed e = run_expecting_a_finding(planted<Bug::l_m_not_loaded>);
  check_report(e, Check::uninitialised_read, "mi");
  CHECK(e.finding().phase == 3);  // after the barriers of line 2, line 6 and line 8
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
