/// \file test_common.cpp
/// \brief Tests of common/: reference, tolerance rule, fixtures, .npy, the driver's bad-input handling.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "common/driver.hpp"
#include "common/fixtures.hpp"
#include "common/npy.hpp"
#include "common/reference.hpp"
#include "common/workspace.hpp"

using namespace common;

namespace {

// A "step" for exercising the driver: fp32 standard attention from common.
StepInfo fake_step() {
  StepInfo s;
  s.name = "fake_step";
  s.title = "fp32 standard attention, for driver tests";
  s.forward = [](const Problem& p, const Options&) { return standard_attention_fp32(p); };
  s.head_dims = {1, 8, 64};
  s.has_trace = false;
  return s;
}

// Runs the driver with `args`, returns the exit code; stdout/stderr captured.
int run(const std::vector<std::string>& args, std::string* out = nullptr, std::string* err = nullptr) {
  std::vector<std::string> storage = {"fake_step"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : storage) argv.push_back(a.data());
  std::ostringstream out_s, err_s;
  auto* old_out = std::cout.rdbuf(out_s.rdbuf());
  auto* old_err = std::cerr.rdbuf(err_s.rdbuf());
  const int code = run_program(fake_step(), static_cast<int>(argv.size()), argv.data());
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  if (out) *out = out_s.str();
  if (err) *err = err_s.str();
  return code;
}

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("flash_common_tests_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("reference: the hand-worked example gives -0.88 in both rows") {
  const Fixture f = hand_worked_example();
  const Reference ref = reference_attention(f.problem);
  REQUIRE(ref.o.size() == 2);
  CHECK(ref.o[0] == doctest::Approx(-0.8808).epsilon(1e-4));
  CHECK(ref.o[1] == doctest::Approx(-0.8808).epsilon(1e-4));
  // L = log(e^0 + e^2) for both rows.
  CHECK(ref.lse[0] == doctest::Approx(std::log(1 + std::exp(2.0))));
}

TEST_CASE("reference: the 2x2 M=9 case and a causal row computed by hand") {
  const Fixture f = two_by_two_m9();
  const Reference ref = reference_attention(f.problem);
  for (size_t i = 0; i < 4; ++i) CHECK(ref.o[i] == doctest::Approx(f.expected_o[i]));

  // Causal, N=2, d=1: row 0 sees only key 0, so O_0 = V_0 and L_0 = s_00.
  Problem p = hand_worked_example().problem;
  p.causal = true;
  const Reference c = reference_attention(p);
  CHECK(c.o[0] == doctest::Approx(0.0));
  CHECK(c.lse[0] == doctest::Approx(0.0));
  CHECK(c.o[1] == doctest::Approx(-0.8808).epsilon(1e-4));
}

TEST_CASE("reference: scores of size 1e3 do not overflow") {
  ConformanceCase c{"big", Shape{1, 1, 64, 64, 64}, false, 0.0f, 1e3};
  const Problem p = make_problem(c, 7);
  const Reference ref = reference_attention(p);
  for (double x : ref.o) REQUIRE(std::isfinite(x));
  double biggest = 0;
  for (double x : ref.lse) biggest = std::max(biggest, std::abs(x));
  CHECK(biggest > 300);  // the scores really are large
}

TEST_CASE("tolerance rule: fp32 standard attention passes, a perturbed or unwritten result fails") {
  const Problem p = make_random_problem(Shape{1, 2, 33, 47, 32}, false, 0.0f, 11);
  Result r = standard_attention_fp32(p);
  CHECK(check_result(p, r).passed);

  Result wrong = r;
  wrong.o[5] += 1e-3f;  // the size of a typical tail-tile bug
  CHECK_FALSE(check_result(p, wrong).passed);

  Result wrong_lse = r;
  wrong_lse.lse.back() += 1e-4f;
  CHECK_FALSE(check_result(p, wrong_lse).passed);

  Result poisoned = allocate_result(p.shape);
  CHECK(std::isnan(poisoned.o[0]));
  CHECK_FALSE(check_result(p, poisoned).passed);

  Result partly = r;
  partly.o.back() = std::nanf("");
  CHECK_FALSE(check_result(p, partly).passed);
}

TEST_CASE("inputs: the same seed gives the same tensors, different seeds differ") {
  const Shape s{1, 1, 8, 8, 4};
  const Problem a = make_random_problem(s, false, 0.0f, 3);
  const Problem b = make_random_problem(s, false, 0.0f, 3);
  const Problem c = make_random_problem(s, false, 0.0f, 4);
  CHECK(a.q == b.q);
  CHECK(a.q != c.q);
  CHECK(a.scale == doctest::Approx(0.5));
  for (float x : a.v) CHECK((x >= -1.0f && x < 1.0f));
}

TEST_CASE("conformance list covers what DESIGN.md asks for") {
  const auto cases = conformance_cases();
  std::set<int64_t> lengths, dims;
  bool causal = false, unequal = false, multi = false, big = false, scaled = false;
  for (const auto& c : cases) {
    lengths.insert(c.shape.seq_q);
    dims.insert(c.shape.head_dim);
    causal |= c.causal;
    unequal |= c.shape.seq_q != c.shape.seq_kv;
    multi |= c.shape.batch_heads() > 1;
    big |= c.score_magnitude >= 1e3;
    scaled |= c.scale > 0;
  }
  for (int64_t n : {1, 2, 15, 16, 17, 31, 33, 100, 257, 1000}) CHECK(lengths.count(n) == 1);
  for (int64_t d : {1, 8, 32, 64, 80, 96, 128}) CHECK(dims.count(d) == 1);
  CHECK((causal && unequal && multi && big && scaled));
  // Filtering by supported head dims and length.
  for (const auto& c : conformance_cases({32, 64}, 100)) {
    CHECK((c.shape.head_dim == 32 || c.shape.head_dim == 64));
    CHECK(c.shape.seq_q <= 100);
  }
}

TEST_CASE("workspace: peak bytes are measured") {
  WorkspaceCounter::reset_peak();
  const int64_t before = WorkspaceCounter::live();
  {
    Workspace<float> a(1000);
    Workspace<double> b(10);
  }
  CHECK(WorkspaceCounter::peak() - before == 1000 * 4 + 10 * 8);
  CHECK(WorkspaceCounter::live() == before);
}

TEST_CASE("npy: round trip keeps shape and values") {
  const auto dir = temp_dir("roundtrip");
  const std::vector<float> data = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  write_npy((dir / "a.npy").string(), {1, 2, 3}, data);
  const NpyArray back = read_npy((dir / "a.npy").string());
  CHECK(back.shape == std::vector<int64_t>{1, 2, 3});
  CHECK(back.data == data);
  write_npy((dir / "b.npy").string(), {6}, data);
  CHECK(read_npy((dir / "b.npy").string()).shape == std::vector<int64_t>{6});
}

namespace {

// Writes a .npy file with an arbitrary header and payload.
void write_raw(const std::filesystem::path& path, const std::string& header, size_t payload_bytes) {
  std::string h = header;
  h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
  h.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(h.size() & 0xff), static_cast<char>(h.size() >> 8)};
  out.write(len, 2);
  out << h << std::string(payload_bytes, '\0');
}

}  // namespace

TEST_CASE("npy: malformed files are rejected with a clear error") {
  const auto dir = temp_dir("malformed");
  auto message = [](const std::filesystem::path& p) {
    try {
      read_npy(p.string());
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  write_raw(dir / "f8.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16);
  CHECK(message(dir / "f8.npy").find("only float32") != std::string::npos);
  write_raw(dir / "fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16);
  CHECK(message(dir / "fortran.npy").find("Fortran") != std::string::npos);
  write_raw(dir / "short.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 8);
  CHECK(message(dir / "short.npy").find("fewer elements") != std::string::npos);
  write_raw(dir / "long.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 8);
  CHECK(message(dir / "long.npy").find("more data") != std::string::npos);
  write_raw(dir / "shape.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", 8);
  CHECK(message(dir / "shape.npy").find("malformed shape") != std::string::npos);
  std::ofstream(dir / "text.npy") << "hello";
  CHECK(message(dir / "text.npy").find("not a .npy file") != std::string::npos);
  CHECK(message(dir / "missing.npy").find("cannot open") != std::string::npos);
}

TEST_CASE("driver: bad options give one line on stderr and exit code 2") {
  struct Bad {
    std::vector<std::string> args;
    std::string mentions;
  };
  const std::vector<Bad> bad = {
      {{"--bogus"}, "unknown option"},
      {{"--head-dim", "0"}, "--head-dim"},
      {{"--batch", "abc"}, "--batch"},
      {{"--seq-q", "-5"}, "--seq-q"},
      {{"--scale", "-1"}, "--scale"},
      {{"--scale", "nan"}, "--scale"},
      {{"--repeat"}, "needs a value"},
      {{"--head-dim", "32"}, "supported: 1 8 64"},
      {{"--sram-floats", "100"}, "not used by"},
      {{"--seq-q", "100000", "--seq-kv", "100000", "--heads", "100000"}, "2^31-1"},
      {{"--load", "/nonexistent/dir"}, "cannot open"},
      {{"--trace"}, "no --trace"},
      {{"--fixture", "nope"}, "unknown fixture"},
  };
  for (const Bad& b : bad) {
    std::string err;
    CAPTURE(b.args.front());
    CHECK(run(b.args, nullptr, &err) == 2);
    CHECK(err.find(b.mentions) != std::string::npos);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  }
}

TEST_CASE("driver: --check, --json, --save and --load") {
  const auto dir = temp_dir("driver");
  std::string out;
  REQUIRE(run({"--seq-q", "20", "--seq-kv", "30", "--head-dim", "8", "--check", "--json", "--save",
               dir.string()},
              &out) == 0);
  CHECK(out.find("\"step\": \"fake_step\"") != std::string::npos);
  CHECK(out.find("\"passed\": true") != std::string::npos);
  CHECK(out.find("\"peak_bytes\"") != std::string::npos);
  const NpyArray o = read_npy((dir / "o.npy").string());
  CHECK(o.shape == std::vector<int64_t>{1, 4, 20, 8});
  CHECK(read_npy((dir / "lse.npy").string()).shape == std::vector<int64_t>{1, 4, 20});

  // --load: the shape comes from the files.
  const Problem p = make_random_problem(Shape{2, 1, 5, 7, 8}, false, 0.0f, 9);
  write_npy((dir / "q.npy").string(), {2, 1, 5, 8}, p.q);
  write_npy((dir / "k.npy").string(), {2, 1, 7, 8}, p.k);
  write_npy((dir / "v.npy").string(), {2, 1, 7, 8}, p.v);
  REQUIRE(run({"--load", dir.string(), "--check", "--json", "--causal"}, &out) == 0);
  CHECK(out.find("\"seq_q\": 5, \"seq_kv\": 7") != std::string::npos);
  CHECK(out.find("\"causal\": true") != std::string::npos);

  // Mismatched files are an input error.
  write_npy((dir / "v.npy").string(), {2, 1, 6, 8}, std::vector<float>(96));
  std::string err;
  CHECK(run({"--load", dir.string()}, nullptr, &err) == 2);
  CHECK(err.find("same shape") != std::string::npos);
}

TEST_CASE("driver: --fixture runs a named example") {
  const auto dir = temp_dir("fixture");
  std::string out;
  REQUIRE(run({"--fixture", "hand_worked_n2_d1", "--check", "--save", dir.string()}, &out) == 0);
  CHECK(out.find("N_q=2 N_kv=2 d=1") != std::string::npos);
  const NpyArray o = read_npy((dir / "o.npy").string());
  REQUIRE(o.data.size() == 2);
  CHECK(o.data[0] == doctest::Approx(-0.8808).epsilon(1e-4));
}

TEST_CASE("driver: a wrong step fails --check with exit code 1") {
  StepInfo s = fake_step();
  s.forward = [](const Problem& p, const Options&) {
    Result r = standard_attention_fp32(p);
    r.o[0] += 0.01f;
    return r;
  };
  std::string argv0 = "x", a1 = "--check", a2 = "--head-dim", a3 = "8";
  char* argv[] = {argv0.data(), a1.data(), a2.data(), a3.data()};
  std::ostringstream sink;
  auto* old = std::cout.rdbuf(sink.rdbuf());
  const int code = run_program(s, 4, argv);
  std::cout.rdbuf(old);
  CHECK(code == 1);
  CHECK(sink.str().find("FAIL") != std::string::npos);
}

TEST_CASE("flops: 4·B·H·N_q·N_kv·d, halved when causal") {
  const Shape s{2, 3, 5, 7, 11};
  CHECK(attention_flops(s, false) == 4.0 * 2 * 3 * 5 * 7 * 11);
  CHECK(attention_flops(s, true) == 2.0 * 2 * 3 * 5 * 7 * 11);
}
