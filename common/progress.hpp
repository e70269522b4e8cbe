/// \file progress.hpp
/// \brief A one-line progress bar on stderr for long CPU runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace common {

/// Prints "[#####.....]  52%" on stderr, at most ten times a second, when enabled.
/// Does nothing when disabled (output piped, `--json`), so callers need no `if`.
class Progress {
 public:
  /// A bar for `total` units of work.
  Progress(bool enabled, int64_t total) : enabled_(enabled && total > 0), total_(total) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  /// Clears the line.
  ~Progress() {
    if (shown_) std::fprintf(stderr, "\r%40s\r", "");
  }
  /// Marks `done` units of `total` as finished.
  void update(int64_t done) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (shown_ && now - last_ < std::chrono::milliseconds(100) && done < total_) return;
    last_ = now;
    shown_ = true;
    const int percent = static_cast<int>(100 * done / total_);
    char bar[21];
    for (int c = 0; c < 20; ++c) bar[c] = c < percent / 5 ? '#' : '.';
    bar[20] = '\0';
    std::fprintf(stderr, "\r[%s] %3d%%", bar, percent);
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  int64_t total_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace common
