/// \file cli.cpp
/// \brief Option definitions and strict number parsing for every program.
#include "common/cli.hpp"

#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "common/output_file.hpp"

namespace common::cli {

namespace {

bool all_digits(const std::string& text) {
  if (text.empty() || text.size() > 20) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

int64_t parse_int(const std::string& option, const std::string& text, int64_t lo, int64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  std::string digits = text;
  const bool negative = !digits.empty() && digits[0] == '-';
  if (negative) digits.erase(0, 1);
  if (!all_digits(digits)) throw InputError(option + " needs an integer in " + range + ", got '" + text + "'");
  errno = 0;
  const unsigned long long magnitude = std::strtoull(digits.c_str(), nullptr, 10);
  const bool too_big = errno == ERANGE || magnitude > uint64_t(INT64_MAX);
  const int64_t value = negative ? -int64_t(magnitude) : int64_t(magnitude);
  if (too_big || value < lo || value > hi) {
    throw InputError(option + " needs an integer in " + range + ", got '" + text + "'");
  }
  return value;
}

uint64_t parse_uint64(const std::string& option, const std::string& text) {
  errno = 0;
  const unsigned long long value = all_digits(text) ? std::strtoull(text.c_str(), nullptr, 10) : 0;
  if (!all_digits(text) || errno == ERANGE) {
    throw InputError(option + " needs an integer in [0, 18446744073709551615], got '" + text + "'");
  }
  return value;
}

float parse_float(const std::string& option, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double value = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
  const bool whole =
      !text.empty() && end == text.c_str() + text.size() && !std::isspace(static_cast<unsigned char>(text[0]));
  if (!whole || !std::isfinite(value) || std::abs(value) > double(FLT_MAX)) {
    throw InputError(option + " needs a finite number (float32: |x| <= 3.4e38), got '" + text + "'");
  }
  return static_cast<float>(value);
}

std::string parse_nonempty(const std::string& option, const std::string& text, const std::string& what) {
  if (text.empty()) throw InputError(option + " needs " + what + ", got ''");
  return text;
}

void add_problem_options(CLI::App& app, ProblemSpec& spec, const ProblemOptions& which) {
  const std::string dim_range = "1 … " + std::to_string(kMaxDim);
  const auto dim = [&](const char* name, int64_t& field, const std::string& help) {
    return add_int_option(app, name, field, 1, kMaxDim, help + " (" + dim_range + ")", "N");
  };
  std::vector<CLI::Option*> shape_options = {
      dim("--batch", spec.shape.batch, "batch size B, default " + std::to_string(spec.shape.batch)),
      dim("--heads", spec.shape.heads, "heads H, default " + std::to_string(spec.shape.heads)),
      dim("--seq-q", spec.shape.seq_q, "query length N_q, default " + std::to_string(spec.shape.seq_q)),
      dim("--seq-kv", spec.shape.seq_kv, "key/value length N_kv, default " + std::to_string(spec.shape.seq_kv)),
      dim("--head-dim", spec.shape.head_dim, "head dimension d, default " + std::to_string(spec.shape.head_dim))};
  if (which.seq_shorthand) {
    shape_options.push_back(app.add_option_function<std::string>(
                                   "--seq",
                                   [&spec](const std::string& text) {
                                     spec.shape.seq_q = spec.shape.seq_kv = parse_int("--seq", text, 1, kMaxDim);
                                   },
                                   "N_q = N_kv = N (" + dim_range + ")")
                                ->type_name("N"));
  }
  app.add_flag("--causal", spec.causal, "causal mask, top-left aligned (query i sees keys j <= i)");
  app.add_option_function<std::string>(
         "--scale", [&spec](const std::string& text) { spec.scale = parse_float("--scale", text); },
         "softmax scale, any finite number (default 1/sqrt(d))")
      ->type_name("S");
  CLI::Option* seed = app.add_option_function<std::string>(
                             "--seed", [&spec](const std::string& text) { spec.seed = parse_uint64("--seed", text); },
                             "seed of the random inputs, default " + std::to_string(spec.seed))
                          ->type_name("S");
  if (!which.files) return;
  CLI::Option* load = add_text_option(
      app, "--load", spec.load_dir, "a directory name",
      "read DIR/q.npy, DIR/k.npy, DIR/v.npy (float32, [B, H, N, d]); the shape comes from the files", "DIR");
  CLI::Option* fixture = add_text_option(app, "--fixture", spec.fixture, "a fixture name",
                                         "a named example instead of random inputs: hand_worked_n2_d1 (O = -0.88), "
                                         "two_by_two_m9, seed002_n16_d8",
                                         "NAME");
  load->excludes(fixture);
  for (CLI::Option* option : shape_options) {
    load->excludes(option);
    fixture->excludes(option);
  }
  load->excludes(seed);
  fixture->excludes(seed);
}

CLI::Option* add_int_option(CLI::App& app, const std::string& name, int64_t& value, int64_t lo, int64_t hi,
                            const std::string& help, const std::string& type_name) {
  return app
      .add_option_function<std::string>(
          name, [name, &value, lo, hi](const std::string& text) { value = parse_int(name, text, lo, hi); }, help)
      ->type_name(type_name);
}

CLI::Option* add_text_option(CLI::App& app, const std::string& name, std::string& value, const std::string& what,
                             const std::string& help, const std::string& type_name) {
  return app
      .add_option_function<std::string>(
          name, [name, &value, what](const std::string& text) { value = parse_nonempty(name, text, what); }, help)
      ->type_name(type_name);
}

CLI::Option* add_csv_option(CLI::App& app, std::string& path, const std::string& help) {
  return add_text_option(app, "--csv", path, "a file name", help, "FILE");
}

CLI::Option* add_repeat_option(CLI::App& app, int& repeat, int min, const std::string& help) {
  return app
      .add_option_function<std::string>(
          "--repeat",
          [&repeat, min](const std::string& text) {
            repeat = static_cast<int>(parse_int("--repeat", text, min, 100000));
          },
          help)
      ->type_name("R");
}

bool parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    flush_stdout();
    return false;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    flush_stdout();
    return false;
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    for (char& c : message) {
      if (c == '\n') c = ' ';
    }
    throw InputError(message + " (see --help)");
  }
  return true;
}

}  // namespace common::cli
