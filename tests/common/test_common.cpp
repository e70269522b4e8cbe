/// \file test_common.cpp
/// \brief Tests of common/: reference, tolerance rule, fixtures, .npy, the driver's bad-input handling.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>
#include <vector>

#include "common/driver.hpp"
#include "common/fixtures.hpp"
#include "common/host_timing.hpp"
#include "common/npy.hpp"
#include "common/output_file.hpp"
#include "common/reference.hpp"
#include "common/testing.hpp"
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

// Runs the driver on fake_step() with `args`, returns the exit code; stdout/stderr captured.
int run(const std::vector<std::string>& args, std::string* out = nullptr, std::string* err = nullptr) {
  return testing::run_program_captured(fake_step(), args, out, err);
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
  ConformanceCase c{"big", Shape{1, 1, 64, 64, 64}, false, std::nullopt, 1e3};
  const Problem p = make_problem(c, 7);
  const Reference ref = reference_attention(p);
  for (double x : ref.o) REQUIRE(std::isfinite(x));
  double biggest = 0;
  for (double x : ref.lse) biggest = std::max(biggest, std::abs(x));
  CHECK(biggest > 300);  // the scores really are large
}

TEST_CASE("tolerance rule: fp32 standard attention passes, a perturbed or unwritten result fails") {
  const Problem p = make_random_problem(Shape{1, 2, 33, 47, 32}, false, std::nullopt, 11);
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

TEST_CASE(
    "tolerance floor: 1e-6 for scores of size 1; at scores of size 1e3, half of what rounding two tied scores costs") {
  // Scores of order 1: the floors are 1e-6, the rule as strict as ever.
  const Problem small = make_random_problem(Shape{1, 2, 33, 47, 32}, false, std::nullopt, 11);
  const Reference small_ref = reference_attention(small);
  CHECK(small_ref.max_abs_s < 5);
  CHECK(small_ref.max_abs_v <= 1);
  CHECK(tolerance_floor_o(small_ref, Precision::fp32) == kToleranceFloor);
  CHECK(tolerance_floor_lse(small_ref) == kToleranceFloor);

  // Scores of size 1e3: u/2 · max|S| · max|V| for O, u/2 · max|S| for L (u = 2^-24).
  const ConformanceCase c{"big", Shape{1, 2, 100, 100, 64}, false, std::nullopt, 1e3};
  const Problem big = make_problem(c, 7);
  const Reference ref = reference_attention(big);
  double max_s = 0, max_v = 0;
  for (int64_t bh = 0; bh < 2; ++bh) {
    for (int64_t i = 0; i < 100; ++i) {
      for (int64_t j = 0; j < 100; ++j) {
        double dot = 0;
        for (int64_t c2 = 0; c2 < 64; ++c2)
          dot += double(big.q[(bh * 100 + i) * 64 + c2]) * big.k[(bh * 100 + j) * 64 + c2];
        max_s = std::max(max_s, std::abs(double(big.scale) * dot));
      }
    }
  }
  for (float x : big.v) max_v = std::max(max_v, std::abs(double(x)));
  CHECK(ref.max_abs_s == doctest::Approx(max_s).epsilon(1e-12));
  CHECK(ref.max_abs_v == max_v);
  const double u = std::ldexp(1.0, -24);
  CHECK(tolerance_floor_o(ref, Precision::fp32) == doctest::Approx(u / 2 * max_s * max_v));
  CHECK(tolerance_floor_lse(ref) == doctest::Approx(u / 2 * max_s));
  CHECK(tolerance_floor_o(ref, Precision::fp32) > 1e-5);  // the scores really are large

  CHECK(tolerance_floor_o(ref, Precision::fp32) < 2e-4);

  // Correct fp32 attention passes there. With these scores the doubled baseline error
  // alone is 5e-5 to 1e-3 from input to input; where it is small (seed 8), a tail-tile
  // bug's 1e-3 fails.
  CHECK(check_result(big, standard_attention_fp32(big)).passed);
  const Problem big8 = make_problem(c, 8);
  Result r = standard_attention_fp32(big8);
  CHECK(check_result(big8, r).passed);
  r.o[4321] += 1e-3f;
  CHECK_FALSE(check_result(big8, r).passed);
}

TEST_CASE("inputs: the same seed gives the same tensors, different seeds differ") {
  const Shape s{1, 1, 8, 8, 4};
  const Problem a = make_random_problem(s, false, std::nullopt, 3);
  const Problem b = make_random_problem(s, false, std::nullopt, 3);
  const Problem c = make_random_problem(s, false, std::nullopt, 4);
  CHECK(a.q == b.q);
  CHECK(a.q != c.q);
  CHECK(a.scale == doctest::Approx(0.5));
  for (float x : a.v) CHECK((x >= -1.0f && x < 1.0f));
}

TEST_CASE("conformance list covers what DESIGN.md asks for") {
  const auto cases = conformance_cases();
  std::set<int64_t> lengths, dims;
  bool causal = false, unequal = false, multi = false, big = false, scaled = false, negative = false, zero = false;
  for (const auto& c : cases) {
    lengths.insert(c.shape.seq_q);
    dims.insert(c.shape.head_dim);
    causal |= c.causal;
    unequal |= c.shape.seq_q != c.shape.seq_kv;
    multi |= c.shape.batch_heads() > 1;
    big |= c.score_magnitude >= 1e3;
    scaled |= c.scale.has_value();
    negative |= c.scale && *c.scale < 0;
    zero |= c.scale && *c.scale == 0;
  }
  for (int64_t n : {1, 2, 15, 16, 17, 31, 33, 100, 257, 1000}) CHECK(lengths.count(n) == 1);
  for (int64_t d : {1, 8, 32, 64, 80, 96, 128}) CHECK(dims.count(d) == 1);
  CHECK((causal && unequal && multi && big && scaled && negative && zero));
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

// read_npy's error message for `path`, or "accepted".
std::string message(const std::filesystem::path& path) {
  try {
    read_npy(path.string());
  } catch (const InputError& e) {
    return std::string(e.what());
  }
  return std::string("accepted");
}

}  // namespace

TEST_CASE("npy: malformed files are rejected with a clear error") {
  const auto dir = temp_dir("malformed");
  write_raw(dir / "f8.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16);
  CHECK(message(dir / "f8.npy").find("only float32") != std::string::npos);
  write_raw(dir / "fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16);
  CHECK(message(dir / "fortran.npy").find("Fortran") != std::string::npos);
  write_raw(dir / "short.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 8);
  CHECK(message(dir / "short.npy").find("the file holds 8") != std::string::npos);
  write_raw(dir / "long.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 8);
  CHECK(message(dir / "long.npy").find("needs 4 bytes") != std::string::npos);
  write_raw(dir / "shape.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", 8);
  CHECK(message(dir / "shape.npy").find("malformed header: unknown name x") != std::string::npos);
  std::ofstream(dir / "text.npy") << "hello";
  CHECK(message(dir / "text.npy").find("not a .npy file") != std::string::npos);
  CHECK(message(dir / "missing.npy").find("cannot open") != std::string::npos);
  CHECK(message(dir).find("not a regular file") != std::string::npos);
}

TEST_CASE("npy: the header is read as the Python dict literal it is") {
  const auto dir = temp_dir("header");
  // A key named inside another key's string is not that key: the dtype is '<f8'.
  write_raw(dir / "note.npy", "{'note': \"'descr': '<f4'\", 'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
            16);
  CHECK(message(dir / "note.npy") ==
        (dir / "note.npy").string() + ": dtype '<f8' is not supported; only float32 ('<f4') is");
  // ... and the other way round: a float32 array whose extra key mentions another dtype loads.
  write_raw(dir / "f4.npy",
            "{\"descr\": \"<f4\", 'note': 'descr: <f8, shape: (9,)', 'fortran_order': False, "
            "'shape': (1, 2)}",
            8);
  const NpyArray a = read_npy((dir / "f4.npy").string());
  CHECK(a.shape == std::vector<int64_t>{1, 2});
  // Quotes, commas and parentheses inside strings; escaped quotes.
  write_raw(dir / "quotes.npy",
            "{'a,b': '(1, 2)', 'it\\'s': \"}\", 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 12);
  CHECK(read_npy((dir / "quotes.npy").string()).shape == std::vector<int64_t>{3});
  // The empty shape is a 0-d array of one element.
  write_raw(dir / "scalar.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4);
  CHECK(read_npy((dir / "scalar.npy").string()).shape.empty());
  // A structured dtype (a list) is a dtype, not a malformed header.
  write_raw(dir / "record.npy", "{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4);
  CHECK(message(dir / "record.npy").find("dtype [('x', '<f4')] is not supported") != std::string::npos);
  // What is not a dict of str keys is refused, naming the problem.
  write_raw(dir / "dup.npy", "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 4);
  CHECK(message(dir / "dup.npy").find("malformed header: the key 'descr' twice") != std::string::npos);
  write_raw(dir / "open.npy", "{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}", 4);
  CHECK(message(dir / "open.npy").find("malformed header") != std::string::npos);
  write_raw(dir / "unclosed.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", 4);
  CHECK(message(dir / "unclosed.npy").find("malformed header") != std::string::npos);
  write_raw(dir / "name.npy", "{'descr': '<f4', 'fortran_order': Nope, 'shape': (1,)}", 4);
  CHECK(message(dir / "name.npy").find("malformed header: unknown name Nope") != std::string::npos);
  write_raw(dir / "order.npy", "{'descr': '<f4', 'fortran_order': 'False', 'shape': (1,)}", 4);
  CHECK(message(dir / "order.npy").find("fortran_order must be True or False, got 'False'") != std::string::npos);
  write_raw(dir / "key.npy", "{1: '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 4);
  CHECK(message(dir / "key.npy").find("malformed header: a key that is not a string, 1") != std::string::npos);
  write_raw(dir / "list.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': [1]}", 4);
  CHECK(message(dir / "list.npy").find("malformed shape [1]") != std::string::npos);
  write_raw(dir / "noshape.npy", "{'descr': '<f4', 'fortran_order': False}", 4);
  CHECK(message(dir / "noshape.npy").find("header has no 'shape' entry") != std::string::npos);
  write_raw(dir / "deep.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': ((((((((((1,),),),),),),),),),)}", 4);
  CHECK(message(dir / "deep.npy").find("nested too deep") != std::string::npos);
}

TEST_CASE("npy: a tiny file whose header claims a huge array is refused before anything is allocated") {
  const auto dir = temp_dir("huge");
  write_raw(dir / "q.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 2147483647, 1), }", 0);
  WorkspaceCounter::reset_peak();
  try {
    read_npy((dir / "q.npy").string());
    FAIL("accepted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("8589934588 bytes of data, the file holds 0") != std::string::npos);
  }
}

TEST_CASE("npy: a FIFO is refused, not read (it would block)") {
  const auto dir = temp_dir("fifo");
  const std::string fifo = (dir / "q.npy").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(read_npy(fifo), doctest::Contains("not a regular file"), InputError);
}

TEST_CASE("output files: written whole or not at all") {
  const auto dir = temp_dir("output");
  const std::string path = (dir / "o.npy").string();
  // A failed write leaves no new file, and no temporary file either.
  {
    OutputFile f(path);
    f.write("abc");
  }  // never committed
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(std::filesystem::is_empty(dir));
  // Writing into a symbolic link (e.g. to /dev/full) is refused, not written through.
  std::filesystem::create_symlink("/dev/full", path);
  CHECK_THROWS_WITH_AS(write_npy(path, {1}, {1.0f}), doctest::Contains("symbolic link"), OutputError);
  std::filesystem::remove(path);
  // A directory that does not exist.
  CHECK_THROWS_WITH_AS(write_file((dir / "nope" / "x.csv").string(), "a"), doctest::Contains("does not exist"),
                       OutputError);
  // A committed file has every byte.
  write_file(path, "hello");
  std::ifstream in(path);
  std::string text;
  in >> text;
  CHECK(text == "hello");
}

TEST_CASE("check: a NaN or infinite output never passes, nor a tolerance that is not finite") {
  const Problem p = make_random_problem(Shape{1, 1, 8, 8, 64}, false, std::nullopt, 5);
  Result r = standard_attention_fp32(p);
  r.o[3] = std::numeric_limits<float>::infinity();
  Verdict v = check_result(p, r);
  CHECK_FALSE(v.passed);
  CHECK(v.failure.find("NaN or infinite") != std::string::npos);
  // Scale 3e38 overflows every fp32 score: the baseline's error is infinite,
  // so no tolerance can be set and the check fails rather than passes.
  Problem huge = p;
  huge.scale = 3e38f;
  const Result overflow = standard_attention_fp32(huge);
  v = check_result(huge, overflow);
  CHECK_FALSE(v.passed);
  // V near the largest float: the fp64 answer is finite, fp32's sum is not.
  Problem big_v = p;
  for (float& x : big_v.v) x = 3e38f;
  v = check_result(big_v, standard_attention_fp32(big_v));
  CHECK_FALSE(v.passed);
  CHECK(!v.failure.empty());
}

TEST_CASE("inputs: NaN or infinity in Q, K or V is refused, naming the tensor and the element") {
  Problem p = make_random_problem(Shape{2, 3, 4, 5, 8}, false, std::nullopt, 5);
  p.k[(1 * 3 + 2) * 5 * 8 + 3 * 8 + 7] = -std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH_AS(validate(p), doctest::Contains("K holds -inf at [b=1, h=2, n=3, c=7]"), InputError);
  p = make_random_problem(Shape{1, 1, 4, 5, 8}, false, std::nullopt, 5);
  p.q[0] = std::nanf("");
  CHECK_THROWS_WITH_AS(validate(p), doctest::Contains("inputs must be finite"), InputError);
}

TEST_CASE("inputs: shape_of reads [B, H, N, d] from Q, K and V and names the tensor that disagrees") {
  const Shape s = shape_of({2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 8});
  CHECK(s.batch == 2);
  CHECK(s.heads == 3);
  CHECK(s.seq_q == 5);
  CHECK(s.seq_kv == 7);
  CHECK(s.head_dim == 8);
  CHECK_THROWS_WITH_AS(shape_of({2, 3, 5}, {2, 3, 7, 8}, {2, 3, 7, 8}),
                       "q: expected 4 dimensions [B, H, N, d], got 3 [2, 3, 5]", InputError);
  CHECK_THROWS_WITH_AS(shape_of({2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 6, 8}),
                       "k and v must have the same shape (got [2, 3, 7, 8] and [2, 3, 6, 8])", InputError);
  CHECK_THROWS_WITH_AS(shape_of({2, 3, 5, 8}, {2, 4, 7, 8}, {2, 4, 7, 8}, {"Q", "K", "V"}),
                       "Q and K must agree in B, H and d (got [2, 3, 5, 8] and [2, 4, 7, 8])", InputError);
  CHECK_THROWS_WITH_AS(shape_of({2, 3, 0, 8}, {2, 3, 7, 8}, {2, 3, 7, 8}), "seq_q must be >= 1 (got 0)", InputError);
  CHECK(non_finite_message(std::nanf(""), 8 * 5 + 3, Shape{1, 2, 5, 5, 8}, 5, "q") ==
        "q holds nan at [b=0, h=1, n=0, c=3]; inputs must be finite numbers");
}

TEST_CASE("driver: bad options give one line on stderr and exit code 2") {
  struct Bad {
    std::vector<std::string> args;
    std::string mentions;
  };
  const std::vector<Bad> bad = {
      {{"--bogus"}, "--bogus"},
      {{"--head-dim", "0"}, "--head-dim"},
      {{"--batch", "abc"}, "--batch"},
      {{"--batch", "3x"}, "--batch"},
      {{"--batch", "010"}, "supported"},  // decimal 10, not octal 8: then d = 64 is fine, 10 heads fine ...
      {{"--seq-q", "-5"}, "--seq-q"},
      {{"--seq-q", "2147483648"}, "[1, 2147483647]"},
      {{"--scale", "nan"}, "--scale"},
      {{"--scale", "inf"}, "--scale"},
      {{"--scale", "1e39"}, "--scale"},
      {{"--scale", ""}, "--scale"},
      {{"--repeat"}, "--repeat"},
      {{"--repeat", "3x"}, "--repeat"},
      {{"--head-dim", "32"}, "supported: 1 8 64"},
      {{"--sram-floats", "100"}, "--sram-floats"},
      {{"--seq-q", "100000", "--seq-kv", "100000", "--heads", "100000"}, "2^31-1"},
      {{"--load", "/nonexistent/dir"}, "cannot open"},
      {{"--load", ""}, "--load needs a directory name"},
      {{"--save", ""}, "--save needs a directory name"},
      {{"--fixture", ""}, "--fixture needs a fixture name"},
      {{"--trace"}, "no --trace"},
      {{"--fixture", "nope"}, "unknown fixture"},
      {{"--fixture", "hand_worked_n2_d1", "--seq-q", "4"}, "excludes"},
      {{"--fixture", "hand_worked_n2_d1", "--seed", "4"}, "excludes"},
      {{"--load", "/tmp", "--heads", "4"}, "excludes"},
      {{"--seed", "-1"}, "--seed"},
  };
  for (const Bad& b : bad) {
    std::string err;
    CAPTURE(b.args);
    const int code = run(b.args, nullptr, &err);
    if (b.args.front() == "--batch" && b.args.back() == "010") {
      CHECK(code == 0);  // leading zeros are decimal, as a user means them
      continue;
    }
    CHECK(code == 2);
    CHECK(err.find(b.mentions) != std::string::npos);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  }
}

TEST_CASE("driver: any finite scale runs and is checked: negative, zero, subnormal") {
  for (const char* scale : {"-1", "0", "1e-40", "-0.25", "3"}) {
    CAPTURE(scale);
    std::string out;
    CHECK(run({"--seq-q", "9", "--seq-kv", "13", "--head-dim", "8", "--scale", scale, "--check", "--json"}, &out) == 0);
    CHECK(out.find("\"passed\":true") != std::string::npos);
  }
}

TEST_CASE("driver: --help works and exits 0") {
  std::string out;
  CHECK(run({"--help"}, &out) == 0);
  CHECK(out.find("--seq-q") != std::string::npos);
  CHECK(out.find("Exit codes") != std::string::npos);
}

TEST_CASE("driver: finite inputs that overflow fp32 inside the step: a warning, and a failed check") {
  std::string out, err;
  CHECK(run({"--heads", "1", "--seq-q", "8", "--seq-kv", "8", "--head-dim", "64", "--scale", "3e38"}, &out, &err) == 0);
  CHECK(err.find("warning") != std::string::npos);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  CHECK(run({"--heads", "1", "--seq-q", "8", "--seq-kv", "8", "--head-dim", "64", "--scale", "3e38", "--check"}, &out,
            &err) == 1);
  CHECK(out.find("check PASS") == std::string::npos);
  CHECK(out.find("FAIL") != std::string::npos);
}

TEST_CASE("driver: --check, --json, --save and --load") {
  const auto dir = temp_dir("driver");
  std::string out;
  REQUIRE(run({"--seq-q", "20", "--seq-kv", "30", "--head-dim", "8", "--check", "--json", "--save", dir.string()},
              &out) == 0);
  CHECK(out.find("\"step\":\"fake_step\"") != std::string::npos);
  CHECK(out.find("\"passed\":true") != std::string::npos);
  CHECK(out.find("\"peak_bytes\"") != std::string::npos);
  const NpyArray o = read_npy((dir / "o.npy").string());
  CHECK(o.shape == std::vector<int64_t>{1, 4, 20, 8});
  CHECK(read_npy((dir / "lse.npy").string()).shape == std::vector<int64_t>{1, 4, 20});

  // --load: the shape comes from the files.
  const Problem p = make_random_problem(Shape{2, 1, 5, 7, 8}, false, std::nullopt, 9);
  write_npy((dir / "q.npy").string(), {2, 1, 5, 8}, p.q);
  write_npy((dir / "k.npy").string(), {2, 1, 7, 8}, p.k);
  write_npy((dir / "v.npy").string(), {2, 1, 7, 8}, p.v);
  REQUIRE(run({"--load", dir.string(), "--check", "--json", "--causal"}, &out) == 0);
  CHECK(out.find("\"seq_q\":5,\"seq_kv\":7") != std::string::npos);
  CHECK(out.find("\"causal\":true") != std::string::npos);

  // A NaN in a file is refused, naming the file.
  std::vector<float> q_nan = p.q;
  q_nan[2] = std::nanf("");
  write_npy((dir / "q.npy").string(), {2, 1, 5, 8}, q_nan);
  std::string err;
  CHECK(run({"--load", dir.string()}, nullptr, &err) == 2);
  CHECK(err.find("q.npy holds nan") != std::string::npos);
  write_npy((dir / "q.npy").string(), {2, 1, 5, 8}, p.q);

  // Mismatched files are an input error.
  write_npy((dir / "v.npy").string(), {2, 1, 6, 8}, std::vector<float>(96));
  CHECK(run({"--load", dir.string()}, nullptr, &err) == 2);
  CHECK(err.find("same shape") != std::string::npos);
}

TEST_CASE("driver: a save that cannot be written fails with exit 2 and leaves no new file") {
  const auto dir = temp_dir("save_fail");
  std::string err;
  // o.npy is a link to /dev/full: refused before the run, nothing written.
  std::filesystem::create_symlink("/dev/full", dir / "o.npy");
  CHECK(run({"--head-dim", "8", "--save", dir.string()}, nullptr, &err) == 2);
  CHECK(err.find("symbolic link") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "lse.npy"));
  std::filesystem::remove(dir / "o.npy");
  // lse.npy cannot be written (a directory is in its place): o.npy is not left behind.
  std::filesystem::create_directory(dir / "lse.npy");
  CHECK(run({"--head-dim", "8", "--save", dir.string()}, nullptr, &err) == 2);
  CHECK_FALSE(std::filesystem::exists(dir / "o.npy"));
  std::filesystem::remove(dir / "lse.npy");
  CHECK(std::filesystem::is_empty(dir));
  // A save directory this run created is removed again when the run fails.
  CHECK(run({"--load", (dir / "missing").string(), "--save", (dir / "new").string()}, nullptr, &err) == 2);
  CHECK_FALSE(std::filesystem::exists(dir / "new"));
}

TEST_CASE("driver: --trace is bounded by what it prints") {
  StepInfo s = fake_step();
  s.has_trace = true;
  std::string a[] = {"x", "--trace", "--heads", "1", "--seq-q", "64", "--seq-kv", "64", "--head-dim", "64"};
  char* argv[10];
  for (int i = 0; i < 10; ++i) argv[i] = a[i].data();
  std::ostringstream sink, err;
  auto* old = std::cout.rdbuf(sink.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  const int code = run_program(s, 10, argv);
  std::cout.rdbuf(old);
  std::cerr.rdbuf(old_err);
  CHECK(code == 2);
  CHECK(err.str().find("B*H*N_q*N_kv*d <= 16384") != std::string::npos);
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

TEST_CASE("host timing: phases are counted only while it is on, and taking them starts again") {
  (void)take_host_times();
  { const HostPhase untimed("off"); }
  CHECK(take_host_times().empty());
  set_host_timing(true);
  for (int i = 0; i < 3; ++i) {
    const HostPhase timed("phase");
  }
  add_host_time("given", 250);
  {
    HostPhase stopped("stopped");
    stopped.stop();
    stopped.stop();  // once only: neither this nor the destructor adds a second run
  }
  set_host_timing(false);
  { const HostPhase untimed("phase"); }
  const std::map<std::string, PhaseTotal> taken = take_host_times();
  REQUIRE(taken.size() == 3);
  CHECK(taken.at("stopped").calls == 1);
  CHECK(taken.at("phase").calls == 3);
  CHECK(taken.at("phase").nanoseconds >= 0);
  CHECK(taken.at("given").calls == 1);
  CHECK(taken.at("given").nanoseconds == 250);
  CHECK(take_host_times().empty());
}
