/// \file step25_backward_cpu/test_attention.cpp
/// \brief step25's tests: the gradient conformance suite, the hand-worked gradients, traffic, memory, the program.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "attention.hpp"
#include "common/driver.hpp"
#include "common/io_complexity.hpp"
#include "common/npy.hpp"
#include "common/testing.hpp"

namespace {

common::Options with_budget(int64_t sram_floats) {
  common::Options o;
  o.sram_floats = sram_floats;
  return o;
}

/// A fresh, empty directory under the system's temporary directory.
std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("step25_" + name + "_" + std::to_string(common::testing::run_seed()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("step25: the forward is step 2's, and passes the conformance suite") {
  common::testing::check_conformance(step25::describe());
}

TEST_CASE("step25: gradient conformance suite at the default budget") {
  common::testing::check_gradient_conformance(step25::describe());
}

TEST_CASE("step25: gradient conformance suite with small tiles (M = 2000, many tails)") {
  // B_c = ceil(2000 / 8d): 4 at d = 64, 250 at d = 1. Every length gets ragged tiles.
  // As in step 2, the |s| ~ 1e3 cases run at the default budget only.
  common::testing::check_gradient_conformance(step25::describe(), 257, with_budget(2000), /*large_scores=*/false);
}

TEST_CASE("step25: the hand-worked example's gradients, by hand (loss = sum of O)") {
  // Q = [1, 1], K = [0, 2], V = [0, -1], d = 1, scale 1, dO = [1, 1]. Both rows score
  // S = [0, 2], so P = [1, e^2] / (1 + e^2) and O = -P_1. With loss = O_1 + O_2:
  //   dV_j = sum_i P_ij = 2 P_j;   dP_ij = V_j;   D_i = dO_i O_i = -P_1;
  //   dS_i0 = P_0 (0 + P_1) = P_0 P_1,   dS_i1 = P_1 (-1 + P_1) = -P_0 P_1;
  //   dQ_i = dS_i0 K_0 + dS_i1 K_1 = -2 P_0 P_1;   dK_j = sum_i dS_ij Q_i = 2 dS_0j.
  const common::Fixture f = common::hand_worked_example();
  const double e2 = std::exp(2.0), P0 = 1 / (1 + e2), P1 = e2 / (1 + e2);
  const common::Result forward = step25::attention_forward(f.problem, with_budget(f.sram_floats));
  const common::BackwardInputs in{forward.o, forward.lse, {1.0f, 1.0f}};
  for (int64_t M : {int64_t{2}, int64_t{1} << 17}) {  // B_c = B_r = 1 (four tiles), and one tile
    CAPTURE(M);
    const common::Gradients g = step25::attention_backward(f.problem, in, with_budget(M));
    CHECK(g.dq[0] == doctest::Approx(-2 * P0 * P1).epsilon(1e-6));
    CHECK(g.dq[1] == doctest::Approx(-2 * P0 * P1).epsilon(1e-6));
    CHECK(g.dk[0] == doctest::Approx(2 * P0 * P1).epsilon(1e-6));
    CHECK(g.dk[1] == doctest::Approx(-2 * P0 * P1).epsilon(1e-6));
    CHECK(g.dv[0] == doctest::Approx(2 * P0).epsilon(1e-6));
    CHECK(g.dv[1] == doctest::Approx(2 * P1).epsilon(1e-6));
  }
  CHECK(-2 * P0 * P1 == doctest::Approx(-0.20999).epsilon(1e-4));  // the page's figures
}

TEST_CASE("step25: extreme budgets and the named fixtures") {
  const uint64_t seed = common::testing::run_seed();
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const common::Problem p = common::make_random_problem(common::Shape{1, 2, 37, 23, 16}, causal, std::nullopt, seed);
    CHECK(common::algorithm2_tiles(1, p.shape).Bc == 1);  // M = 1: B_c = B_r = 1
    common::testing::check_gradient_problem(step25::describe(), p, with_budget(1));
    const auto big = common::algorithm2_tiles(int64_t{1} << 20, p.shape);
    CHECK(big.Tc == 1);  // one K/V tile; B_r <= d still cuts Q
    common::testing::check_gradient_problem(step25::describe(), p, with_budget(int64_t{1} << 20));
  }
  for (const common::Fixture& f : {common::two_by_two_m9(), common::seed002_n16_d8()}) {
    CAPTURE(f.name);
    common::testing::check_gradient_problem(step25::describe(), f.problem, with_budget(f.sram_floats));
  }
}

TEST_CASE("step25: counted HBM traffic equals the closed form of Algorithm 2") {
  for (int64_t M : {1, 64, 2000, 8192, 1 << 17}) {
    for (const common::Shape& s :
         {common::Shape{1, 1, 100, 100, 8}, common::Shape{2, 3, 17, 257, 32}, common::Shape{1, 2, 1000, 33, 64}}) {
      CAPTURE(M);
      CAPTURE(common::describe(s));
      const common::Problem p = common::make_random_problem(s, false, std::nullopt, 3);
      const common::Result forward = step25::attention_forward(p);
      const common::BackwardInputs in{forward.o, forward.lse, common::make_random_upstream(s, 4)};
      const common::Gradients g = step25::attention_backward(p, in, with_budget(M));
      REQUIRE(g.traffic.has_value());
      const common::Traffic closed = common::algorithm2_traffic(s, common::algorithm2_tiles(M, s));
      CHECK(g.traffic->hbm_read_bytes == closed.hbm_read_bytes);
      CHECK(g.traffic->hbm_write_bytes == closed.hbm_write_bytes);
    }
  }
}

TEST_CASE("step25: the backward's working memory is tiles plus D, not N_q x N_kv") {
  const common::Problem p = common::make_random_problem(common::Shape{1, 1, 2048, 2048, 64}, false, std::nullopt, 5);
  common::RunSettings settings;
  settings.repeat = 0;
  settings.backward = true;
  const std::vector<float> d_o = common::make_random_upstream(p.shape, 6);
  const common::RunReport report = common::run_step(step25::describe(), p, settings, &d_o);
  REQUIRE(report.backward.has_value());
  CHECK(report.backward->gradients.peak_bytes > 0);
  CHECK(report.backward->gradients.peak_bytes * 10 < 2048 * 2048 * 4);
}

TEST_CASE("step25: repeated backward runs give the same bits") {
  const common::Problem p = common::make_random_problem(common::Shape{2, 2, 129, 77, 32}, true, std::nullopt, 7);
  common::testing::check_backward_session(step25::describe(), p, 3);
}

TEST_CASE("step25: bad backward input is refused in one line") {
  common::testing::check_backward_bad_input(step25::describe(), 16);
}

TEST_CASE("step25: --trace follows the hand-worked example's backward") {
  const common::Fixture f = common::hand_worked_example();
  const common::Result forward = step25::attention_forward(f.problem, with_budget(f.sram_floats));
  std::ostringstream out;
  common::Options o = with_budget(2);
  o.trace = &out;
  step25::attention_backward(f.problem, {forward.o, forward.lse, {1.0f, 1.0f}}, o);
  const std::string t = out.str();
  CHECK(t.find("B_c = 1, B_r = 1, T_c = 2, T_r = 2") != std::string::npos);
  CHECK(t.find("D = [[-0.8808, -0.8808]]") != std::string::npos);
  CHECK(t.find("P_ij = [[ 0.8808]]") != std::string::npos);
  CHECK(t.find("dS_ij = [[-0.1050]]") != std::string::npos);
  CHECK(t.find("dQ = [[-0.2100]") != std::string::npos);
}

TEST_CASE("step25: the program's --backward: --save, --load with do.npy, bad dO") {
  const common::StepInfo step = step25::describe();
  const auto dir = fresh_dir("program");
  const std::string d = dir.string();
  std::string out, err;
  // Random inputs, checked and saved: five files.
  CHECK(common::testing::run_program_captured(
            step,
            {"--batch", "1", "--heads", "2", "--seq-q", "33", "--seq-kv", "17", "--head-dim", "8", "--causal",
             "--backward", "--check", "--save", d + "/out"},
            &out, &err) == 0);
  CHECK(out.find("max |dQ - dQ_ref|") != std::string::npos);
  for (const char* name : {"o", "lse", "dq", "dk", "dv"})
    CHECK(std::filesystem::exists(dir / "out" / (std::string(name) + ".npy")));
  CHECK(common::read_npy(d + "/out/dk.npy").shape == std::vector<int64_t>{1, 2, 17, 8});

  // --load DIR reads DIR/do.npy: the saved gradients for dO = 2 · dO' are twice those for dO'.
  const common::Problem p = common::make_random_problem(common::Shape{1, 1, 5, 6, 4}, false, std::nullopt, 9);
  common::write_npy(d + "/q.npy", {1, 1, 5, 4}, p.q);
  common::write_npy(d + "/k.npy", {1, 1, 6, 4}, p.k);
  common::write_npy(d + "/v.npy", {1, 1, 6, 4}, p.v);
  std::vector<float> d_o = common::make_random_upstream(p.shape, 10);
  common::write_npy(d + "/do.npy", {1, 1, 5, 4}, d_o);
  REQUIRE(common::testing::run_program_captured(step, {"--load", d, "--backward", "--check", "--save", d + "/one"},
                                                &out, &err) == 0);
  for (float& x : d_o) x *= 2;
  common::write_npy(d + "/do.npy", {1, 1, 5, 4}, d_o);
  REQUIRE(common::testing::run_program_captured(step, {"--load", d, "--backward", "--save", d + "/two"}, &out, &err) ==
          0);
  const auto one = common::read_npy(d + "/one/dv.npy").data, two = common::read_npy(d + "/two/dv.npy").data;
  REQUIRE(one.size() == two.size());
  for (size_t i = 0; i < one.size(); ++i) CHECK(two[i] == doctest::Approx(2 * one[i]).epsilon(1e-5));

  // A dO of the wrong shape, or holding NaN: exit 2, one line, nothing saved.
  common::write_npy(d + "/do.npy", {1, 1, 6, 4}, std::vector<float>(24, 1.0f));
  CHECK(common::testing::run_program_captured(step, {"--load", d, "--backward", "--save", d + "/bad"}, &out, &err) ==
        2);
  CHECK(err.find("do.npy has shape [1, 1, 6, 4] but O is [1, 1, 5, 4]") != std::string::npos);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  CHECK(!std::filesystem::exists(dir / "bad"));
  d_o[7] = std::nanf("");
  common::write_npy(d + "/do.npy", {1, 1, 5, 4}, d_o);
  CHECK(common::testing::run_program_captured(step, {"--load", d, "--backward"}, &out, &err) == 2);
  CHECK(err.find("holds nan") != std::string::npos);
  // --deterministic means nothing to a CPU step: not an option here.
  CHECK(common::testing::run_program_captured(step, {"--backward", "--deterministic"}, &out, &err) == 2);
  std::filesystem::remove_all(dir);
}
