/// \file cli.hpp
/// \brief The command-line options of every program, each defined once (CLI11).
///
/// The steps' programs, the tour and the benchmarks parse their command lines
/// with CLI11 through these functions, so an option such as `--heads` has one
/// definition, one range and one help text everywhere. Numbers are parsed
/// strictly: `3x`, `010`, an empty value and out-of-range values are refused with a
/// one-line message naming the option and the range.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "common/problem.hpp"

namespace common::cli {

/// The problem a program runs on, as its command line describes it.
struct ProblemSpec {
  Shape shape{1, 4, 512, 512, 64};  ///< B, H, N_q, N_kv, d
  bool causal = false;  ///< --causal
  std::optional<float> scale;  ///< --scale (default 1/sqrt(d))
  uint64_t seed = 1;  ///< --seed of the random inputs
  std::string load_dir;  ///< --load DIR (empty: random inputs)
  std::string fixture;  ///< --fixture NAME (empty: random inputs)
};

/// Largest accepted size of one dimension: a tensor holds at most 2^31 - 1 elements.
inline constexpr int64_t kMaxDim = kMaxTensorElements;

/// `text` as an integer in [lo, hi] (decimal digits only), or an InputError
/// naming `option` and the range.
int64_t parse_int(const std::string& option, const std::string& text, int64_t lo, int64_t hi);

/// `text` as an unsigned 64-bit integer (decimal digits only), or an InputError.
uint64_t parse_uint64(const std::string& option, const std::string& text);

/// `text` as a finite float (any sign, zero and subnormals included), or an InputError.
float parse_float(const std::string& option, const std::string& text);

/// `text` unless it is empty (an InputError: "--load needs a directory name").
std::string parse_nonempty(const std::string& option, const std::string& text, const std::string& what);

/// Which problem options a program takes.
struct ProblemOptions {
  bool seq_shorthand = false;  ///< `--seq N` sets N_q = N_kv = N (the tour)
  bool files = true;  ///< `--load DIR` and `--fixture NAME`
};

/// Adds --batch, --heads, --seq-q, --seq-kv, --head-dim, --causal, --scale,
/// --seed (and --seq, --load, --fixture as `which` says), bound to `spec`.
/// --load and --fixture exclude the shape options and --seed: the problem then
/// comes from the files or the fixture, and a size given beside it would be
/// silently ignored.
void add_problem_options(CLI::App& app, ProblemSpec& spec, const ProblemOptions& which = {});

/// Adds the option `name` (e.g. "--heads"), an integer in [lo, hi] by parse_int,
/// bound to `value`; `type_name` is what --help shows for the value (e.g. "N").
CLI::Option* add_int_option(CLI::App& app, const std::string& name, int64_t& value, int64_t lo, int64_t hi,
                            const std::string& help, const std::string& type_name);

/// Adds the option `name` (e.g. "--save"), a text that must not be empty
/// (parse_nonempty: "--save needs a directory name"), bound to `value`.
CLI::Option* add_text_option(CLI::App& app, const std::string& name, std::string& value, const std::string& what,
                             const std::string& help, const std::string& type_name);

/// Adds `--csv FILE` bound to `path` (the benchmarks' table as CSV).
CLI::Option* add_csv_option(CLI::App& app, std::string& path, const std::string& help);

/// Adds `--repeat R` (`min` … 100000) bound to `repeat`.
CLI::Option* add_repeat_option(CLI::App& app, int& repeat, int min, const std::string& help);

/// Parses the command line. Returns true to go on, false when --help was
/// printed and flushed (exit 0; a failed write throws OutputError). A bad
/// command line throws InputError with CLI11's message on one line.
bool parse(CLI::App& app, int argc, char** argv);

}  // namespace common::cli
