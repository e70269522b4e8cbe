/// \file npy.hpp
/// \brief Reading and writing NumPy `.npy` files (float32, C order only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/output_file.hpp"

namespace common {

/// A float32 array and its shape, as stored in a `.npy` file.
struct NpyArray {
  std::vector<int64_t> shape;  ///< dimensions, outermost first
  std::vector<float> data;  ///< elements in C (row-major) order
};

/// Reads `path`. Accepts a regular file (not a FIFO or a device) in format
/// versions 1.0–3.0, little-endian float32 ('<f4'), C order, whose size matches
/// what its header claims (checked before anything is allocated). Anything else
/// throws InputError naming the file and the problem (wrong dtype, Fortran
/// order, truncated or extra data, bad header).
NpyArray read_npy(const std::string& path);

/// The bytes of a version 1.0 `.npy` header for a float32 array of `shape`.
std::string npy_header(const std::vector<int64_t>& shape);

/// Writes `data` with `shape` into `file` as a `.npy` array ('<f4', C order);
/// the caller commits the file. Throws OutputError.
void write_npy(OutputFile& file, const std::vector<int64_t>& shape, const std::vector<float>& data);

/// Writes `data` with `shape` as the `.npy` file `path`, whole or not at all.
/// Throws OutputError when the sizes disagree or the file cannot be written.
void write_npy(const std::string& path, const std::vector<int64_t>& shape, const std::vector<float>& data);

}  // namespace common
