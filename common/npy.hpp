/// \file npy.hpp
/// \brief Reading and writing NumPy `.npy` files (float32, C order only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace common {

/// A float32 array and its shape, as stored in a `.npy` file.
struct NpyArray {
  std::vector<int64_t> shape;  ///< dimensions, outermost first
  std::vector<float> data;     ///< elements in C (row-major) order
};

/// Reads `path`. Accepts format versions 1.0–3.0, little-endian float32
/// ('<f4'), C order. Anything else throws InputError naming the file and the
/// problem (wrong dtype, Fortran order, truncated data, bad header).
NpyArray read_npy(const std::string& path);

/// Writes `data` with `shape` as a version 1.0 `.npy` file ('<f4', C order).
/// Throws InputError when the sizes disagree or the file cannot be written.
void write_npy(const std::string& path, const std::vector<int64_t>& shape,
               const std::vector<float>& data);

}  // namespace common
