/// \file npy.cpp
/// \brief A small, strict `.npy` reader and writer.
#include "common/npy.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/output_file.hpp"
#include "common/problem.hpp"

namespace common {

namespace {

static_assert(std::endian::native == std::endian::little, "the .npy code assumes a little-endian host");

const char kMagic[] = "\x93NUMPY";

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw InputError(path + ": " + what);
}

// The value text after 'key': in the header dictionary, up to the next ',' at
// depth 0 or the closing '}'.
std::string dict_value(const std::string& header, const std::string& key, const std::string& path) {
  const std::string quoted1 = "'" + key + "'";
  const std::string quoted2 = "\"" + key + "\"";
  size_t pos = header.find(quoted1);
  if (pos == std::string::npos) pos = header.find(quoted2);
  if (pos == std::string::npos) fail(path, "header has no '" + key + "' entry");
  pos = header.find(':', pos);
  if (pos == std::string::npos) fail(path, "malformed header");
  ++pos;
  int depth = 0;
  size_t end = pos;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  std::string value = header.substr(pos, end - pos);
  const auto first = value.find_first_not_of(" \t");
  const auto last = value.find_last_not_of(" \t");
  return first == std::string::npos ? "" : value.substr(first, last - first + 1);
}

std::vector<int64_t> parse_shape(const std::string& text, const std::string& path) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') {
    fail(path, "malformed shape " + text);
  }
  std::vector<int64_t> shape;
  std::string inner = text.substr(1, text.size() - 2);
  std::stringstream ss(inner);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto first = item.find_first_not_of(' ');
    if (first == std::string::npos) continue;  // trailing comma of a 1-tuple
    item = item.substr(first, item.find_last_not_of(' ') - first + 1);
    if (item.empty() || item.size() > 12 ||
        !std::all_of(item.begin(), item.end(), [](unsigned char c) { return std::isdigit(c); })) {
      fail(path, "malformed shape " + text);
    }
    shape.push_back(std::stoll(item));
  }
  return shape;
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  // Only a regular file: a FIFO would block the program, a directory or a
  // device is not an array. Its size bounds what the header may claim.
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) fail(path, std::string("cannot open file (") + std::strerror(errno) + ")");
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  const int64_t file_bytes = int64_t(st.st_size);

  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open file");
  char magic[6] = {};
  in.read(magic, 6);
  if (!in || std::memcmp(magic, kMagic, 6) != 0) fail(path, "not a .npy file (bad magic)");
  unsigned char version[2] = {};
  in.read(reinterpret_cast<char*>(version), 2);
  uint32_t header_len = 0;
  int64_t preamble = 0;
  if (version[0] == 1) {
    unsigned char len[2] = {};
    in.read(reinterpret_cast<char*>(len), 2);
    header_len = len[0] | (len[1] << 8);
    preamble = 10;
  } else if (version[0] == 2 || version[0] == 3) {
    unsigned char len[4] = {};
    in.read(reinterpret_cast<char*>(len), 4);
    header_len = len[0] | (len[1] << 8) | (len[2] << 16) | (uint32_t(len[3]) << 24);
    preamble = 12;
  } else {
    fail(path, "unsupported .npy format version " + std::to_string(version[0]));
  }
  if (!in || header_len > (1u << 20) || preamble + int64_t(header_len) > file_bytes) {
    fail(path, "truncated or oversized header");
  }
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  if (!in) fail(path, "truncated header");

  const std::string descr = dict_value(header, "descr", path);
  if (descr != "'<f4'" && descr != "\"<f4\"") {
    fail(path, "dtype " + descr + " is not supported; only float32 ('<f4') is");
  }
  if (dict_value(header, "fortran_order", path) != "False") {
    fail(path, "Fortran-ordered arrays are not supported; save a C-ordered (contiguous) array");
  }
  NpyArray array;
  array.shape = parse_shape(dict_value(header, "shape", path), path);
  int64_t count = 1;
  for (int64_t dim : array.shape) {
    if (dim != 0 && count > kMaxTensorElements / dim) fail(path, "array too large (more than 2^31-1 elements)");
    count *= dim;
  }
  // Compare with the file's size before allocating: a 128-byte file must not
  // make the program allocate what its header claims.
  const int64_t data_bytes = file_bytes - preamble - int64_t(header_len);
  if (data_bytes != count * int64_t{sizeof(float)}) {
    fail(path, "its shape needs " + std::to_string(count * int64_t{sizeof(float)}) + " bytes of data, the file holds " +
                   std::to_string(data_bytes));
  }
  array.data.resize(static_cast<size_t>(count));
  in.read(reinterpret_cast<char*>(array.data.data()), count * int64_t{sizeof(float)});
  if (!in) fail(path, "file holds fewer elements than its shape says");
  in.peek();
  if (!in.eof()) fail(path, "file holds more data than its shape says");
  return array;
}

std::string npy_header(const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t dim : shape) dims += std::to_string(dim) + ",";
  if (shape.size() > 1) dims.pop_back();  // "(3,)" for 1-D, "(2,3)" otherwise
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Pad with spaces so magic + version + length + header + '\n' is a multiple of 64.
  const size_t preamble = 6 + 2 + 2;
  header.append((64 - (preamble + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kMagic, 6);
  out += std::string("\x01\x00", 2);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header;
}

void write_npy(OutputFile& file, const std::vector<int64_t>& shape, const std::vector<float>& data) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  if (count != static_cast<int64_t>(data.size())) {
    throw OutputError(file.path() + ": shape does not match the number of elements");
  }
  file.write(npy_header(shape));
  file.write(data.data(), data.size() * sizeof(float));
}

void write_npy(const std::string& path, const std::vector<int64_t>& shape, const std::vector<float>& data) {
  OutputFile file(path);
  write_npy(file, shape, data);
  file.commit();
}

}  // namespace common
