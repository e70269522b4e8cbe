/// \file trace.hpp
/// \brief Printing small matrices for `--trace`.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace common {

/// Prints `name = [[...], ...]` for a rows × cols row-major block whose rows are
/// `stride` floats apart, with 4 decimals, on one line per row.
void print_matrix(std::ostream& out, const std::string& name, const float* data, int64_t rows, int64_t cols,
                  int64_t stride, int indent = 4);

}  // namespace common
