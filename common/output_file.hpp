/// \file output_file.hpp
/// \brief Files that appear whole or not at all, and standard output that is checked.
///
/// A program's outputs (`.npy` files, CSV files) are written to a temporary
/// file in the destination's directory, flushed to disk, and renamed onto the
/// destination only when every byte was written. A write that fails — a full
/// disk, a closed pipe, a missing directory — throws OutputError and leaves no
/// new file behind.
#pragma once

#include <string>
#include <string_view>

#include "common/problem.hpp"

namespace common {

/// One output file being written: a temporary file beside `path` until commit().
class OutputFile {
 public:
  /// Checks that `path` may be written (its directory exists; if `path` exists
  /// it is a regular file — a link, a device or a FIFO is refused rather than
  /// written through) and creates the temporary file. Throws OutputError.
  explicit OutputFile(std::string path);
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  /// Takes over `other`'s temporary file; `other` then owns nothing.
  OutputFile(OutputFile&& other) noexcept;
  /// Removes the temporary file unless commit() succeeded.
  ~OutputFile();

  /// Appends `bytes` bytes; throws OutputError if they cannot all be written.
  void write(const void* data, size_t bytes);
  /// Appends text.
  void write(std::string_view text) { write(text.data(), text.size()); }
  /// Flushes to disk and closes; throws OutputError (e.g. the disk is full).
  void finish();
  /// finish() if not done, then renames the temporary file onto the destination.
  void commit();
  /// The destination.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string temp_;
  int fd_ = -1;
  bool committed_ = false;
};

/// Writes `content` to `path` as one OutputFile (whole or not at all).
void write_file(const std::string& path, std::string_view content);

/// Throws OutputError if `path` could not be replaced by an OutputFile (its
/// directory is missing or not writable, or it exists and is not a regular
/// file), so that a program can refuse before it runs for an hour.
void check_writable(const std::string& path);

/// Flushes standard output (C++ and C streams) and throws OutputError if
/// anything written to it was lost (a full disk, /dev/full, a closed pipe).
void flush_stdout();

}  // namespace common
