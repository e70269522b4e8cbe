/// \file output_file.cpp
/// \brief Whole-or-nothing output files (temporary file, fsync, rename) and checked standard output.
#include "common/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <vector>

namespace common {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what, int err = 0) {
  throw OutputError(path + ": " + what + (err ? std::string(" (") + std::strerror(err) + ")" : std::string()));
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

const char* kind_of(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

void check_writable(const std::string& path) {
  if (path.empty()) throw OutputError("an output file name is empty");
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    fail(path,
         std::string("exists and is ") + kind_of(st.st_mode) + "; not replaced (remove it or choose another name)");
  }
  const std::string dir = directory_of(path);
  struct stat dst {};
  if (stat(dir.c_str(), &dst) != 0) fail(path, "its directory " + dir + " does not exist", errno);
  if (!S_ISDIR(dst.st_mode)) fail(path, dir + " is not a directory");
  if (access(dir.c_str(), W_OK | X_OK) != 0) fail(path, "cannot write in " + dir, errno);
}

OutputFile::OutputFile(std::string path) : path_(std::move(path)) {
  check_writable(path_);
  const size_t slash = path_.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : path_.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path_ : path_.substr(slash + 1);
  std::string pattern = dir + "." + base + ".tmp-XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  fd_ = mkstemp(name.data());
  if (fd_ < 0) fail(path_, "cannot create a temporary file beside it", errno);
  temp_ = name.data();
  (void)fchmod(fd_, 0644);
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : path_(std::move(other.path_)), temp_(std::move(other.temp_)), fd_(other.fd_), committed_(other.committed_) {
  other.fd_ = -1;
  other.temp_.clear();
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) (void)close(fd_);
  if (!committed_ && !temp_.empty()) (void)unlink(temp_.c_str());
}

void OutputFile::write(const void* data, size_t bytes) {
  if (fd_ < 0) fail(path_, "written after it was closed");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(path_, "write failed", n < 0 ? errno : EIO);
    p += n;
    bytes -= size_t(n);
  }
}

void OutputFile::finish() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  // fsync reports a full disk or an I/O error that write() may have deferred.
  if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    const int err = errno;
    (void)close(fd);
    fail(path_, "write failed", err);
  }
  if (close(fd) != 0) fail(path_, "write failed", errno);
}

void OutputFile::commit() {
  finish();
  if (rename(temp_.c_str(), path_.c_str()) != 0) fail(path_, "cannot rename the finished file into place", errno);
  committed_ = true;
}

void write_file(const std::string& path, std::string_view content) {
  OutputFile file(path);
  file.write(content);
  file.commit();
}

void flush_stdout() {
  std::cout.flush();
  const bool lost = !std::cout || std::fflush(stdout) != 0 || std::ferror(stdout);
  if (lost) {
    const int err = errno;
    std::cout.clear();
    std::clearerr(stdout);
    throw OutputError(std::string("standard output: write failed") +
                      (err ? std::string(" (") + std::strerror(err) + ")" : std::string()));
  }
}

}  // namespace common
