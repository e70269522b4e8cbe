/// \file trace.cpp
/// \brief Printing small matrices for `--trace`.
#include "common/trace.hpp"

#include <iomanip>

namespace common {

void print_matrix(std::ostream& out, const std::string& name, const float* data, int64_t rows, int64_t cols,
                  int64_t stride, int indent) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  const std::string inner(name.size() + 4, ' ');
  out << pad << name << " = [";
  const auto flags = out.flags();
  out << std::fixed << std::setprecision(4);
  for (int64_t r = 0; r < rows; ++r) {
    if (r > 0) out << "\n" << pad << inner;
    out << "[";
    for (int64_t c = 0; c < cols; ++c) out << (c ? ", " : "") << std::setw(7) << data[r * stride + c];
    out << "]";
  }
  out << "]\n";
  out.flags(flags);
}

}  // namespace common
