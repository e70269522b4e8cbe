/// \file precision_errors.cpp
/// \brief How far from exact standard attention is in fp32, bf16 and fp16, measured:
/// the baselines of the tolerance rule beside the error bound of rounding.
///
/// Usage: build/bin/precision_errors [--csv FILE] [--heads H] [--max-seq N] [--seed S]   (`--help`)
///
/// For each N_q = N_kv in {256, 1024, 4096} (up to --max-seq), d in {64, 128}, causal
/// and not, it draws one problem (B = 1, H heads, the project's seeded inputs), rounds
/// Q, K and V to each precision, and computes on the CPU:
///  - the fp64 reference of the rounded inputs (common::reference_attention);
///  - standard attention in that precision, the baseline of FlashAttention-2's rule
///    (common::baseline_errors: S and the softmax in fp32, P rounded before P·V, fp32
///    accumulation, O rounded), and its max errors on O and L;
///  - for bf16 and fp16, the bound that rounding P and O gives for O,
///    u·max|V| + u·max|O_ref|, with u the precision's unit roundoff (the step 9 page
///    derives it), and for every precision the tolerance a step
///    in that precision gets (2 × the baseline's error + the floor).
/// It prints a table and writes it as CSV (whole, or not at all).
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>

#include "common/cli.hpp"
#include "common/driver.hpp"
#include "common/fixtures.hpp"
#include "common/output_file.hpp"
#include "common/precision.hpp"
#include "common/reference.hpp"

/// Runs the measurement; see the file comment for the options.
int main(int argc, char** argv) {
  return common::guarded_main("precision_errors", [&]() -> int {
    std::string csv_path = "precision_errors.csv";
    int64_t heads = 1, max_seq = 4096, seed = 2024;
    CLI::App app(
        "How far from exact standard attention is in fp32, bf16 and fp16: the baselines of the tolerance rule "
        "beside the error bound of rounding.",
        "precision_errors");
    common::cli::add_csv_option(app, csv_path, "write the table as CSV to FILE (default precision_errors.csv)");
    common::cli::add_int_option(app, "--heads", heads, 1, 64, "heads H (1 … 64, default 1)", "H");
    common::cli::add_int_option(app, "--max-seq", max_seq, 256, 4096,
                                "longest N of 256, 1024, 4096 to run (256 … 4096, default 4096)", "N");
    common::cli::add_int_option(app, "--seed", seed, 0, int64_t(1) << 62, "seed of the inputs (default 2024)", "S");
    app.footer("Exit codes: 0 ok, 2 bad option or a failed write.");
    if (!common::cli::parse(app, argc, argv)) return 0;  // --help
    common::check_writable(csv_path);
    // About 6 ns per head and unit of N^2 * d on one core of the machine the page ran on
    // (the default run, H = 1 up to N = 4096, takes about 40 s there).
    double seconds = 0;
    for (int64_t n : {256, 1024, 4096}) {
      if (n <= max_seq) seconds += 6e-9 * double(heads) * double(n) * double(n) * (64 + 128) * 2;
    }
    if (seconds > 10)
      std::cerr << "precision_errors: this will take about " << common::format_duration(seconds) << "\n";

    std::ostringstream csv;
    csv << "precision,batch,heads,seq,head_dim,causal,unit_roundoff,max_abs_v,max_abs_o,err_o,bound_o,tol_o,"
           "err_lse,tol_lse\n";
    std::cout << "Standard attention in each precision against fp64 of the same rounded inputs (CPU)\n"
              << "B=1 H=" << heads << ", inputs of seed " << seed << "; u = unit roundoff, "
              << "bound = u*max|V| + u*max|O_ref|, tolerance = 2 x error + floor\n\n"
              << std::setw(5) << "dtype" << std::setw(6) << "N" << std::setw(5) << "d" << std::setw(7) << "causal"
              << std::setw(9) << "u" << std::setw(9) << "max|V|" << std::setw(9) << "max|O|" << std::setw(11) << "err O"
              << std::setw(11) << "bound O" << std::setw(7) << "err/u" << std::setw(11) << "tol O" << std::setw(11)
              << "err L" << std::setw(11) << "tol L"
              << "\n";
    for (int64_t n : {256, 1024, 4096}) {
      if (n > max_seq) break;
      for (int64_t d : {64, 128}) {
        for (bool causal : {false, true}) {
          const common::Problem problem =
              common::make_random_problem(common::Shape{1, heads, n, n, d}, causal, std::nullopt, uint64_t(seed));
          for (common::Precision precision :
               {common::Precision::fp32, common::Precision::bf16, common::Precision::fp16}) {
            const common::Problem rounded = common::rounded_inputs(problem, precision);
            const common::Reference ref = common::reference_attention(rounded);
            const common::Errors err = common::baseline_errors(rounded, ref, precision);
            const common::Tolerance tol = common::tolerance_from(err, ref, precision);
            const double u = common::unit_roundoff(precision);
            const double max_v = ref.max_abs_v;
            double max_o = 0;
            for (const double x : ref.o) max_o = std::max(max_o, std::abs(x));
            // The bound models rounding P and O to 16 bits; fp32 rounds neither, its
            // error comes from exp and the sums, and it has no such column.
            const bool rounds_p_and_o = precision != common::Precision::fp32;
            const double bound = u * max_v + u * max_o;
            std::ostringstream bound_text;
            bound_text << std::scientific << std::setprecision(2) << bound;
            csv << common::name(precision) << ",1," << heads << "," << n << "," << d << "," << int(causal) << "," << u
                << "," << max_v << "," << max_o << "," << err.max_err_o << ",";
            if (rounds_p_and_o) csv << bound;
            csv << "," << tol.o << "," << err.max_err_lse << "," << tol.lse << "\n";
            std::cout << std::setw(5) << common::name(precision) << std::setw(6) << n << std::setw(5) << d
                      << std::setw(7) << (causal ? "yes" : "no") << std::scientific << std::setprecision(1)
                      << std::setw(9) << u << std::fixed << std::setprecision(3) << std::setw(9) << max_v
                      << std::setw(9) << max_o << std::scientific << std::setprecision(2) << std::setw(11)
                      << err.max_err_o << std::setw(11) << (rounds_p_and_o ? bound_text.str() : "-") << std::fixed
                      << std::setprecision(2) << std::setw(7) << err.max_err_o / u << std::scientific << std::setw(11)
                      << tol.o << std::setw(11) << err.max_err_lse << std::setw(11) << tol.lse << std::defaultfloat
                      << "\n"
                      << std::flush;
          }
        }
      }
    }
    common::write_file(csv_path, csv.str());
    std::cout << "\nCSV written to " << csv_path << "\n";
    common::flush_stdout();
    return 0;
  });
}
