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
#include <utility>

#include "common/output_file.hpp"
#include "common/problem.hpp"

namespace common {

namespace {

static_assert(std::endian::native == std::endian::little, "the .npy code assumes a little-endian host");

const char kMagic[] = "\x93NUMPY";

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw InputError(path + ": " + what); }

// The header is a Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// parsed here as one: str keys, and values that are str, True/False/None,
// integers or tuples/lists of values. Reading it as a literal (not by searching
// for "'descr'") keeps a key or a quote inside another value's string from
// being taken for the entry itself.
struct Literal {
  enum class Kind { string, name, integer, sequence } kind = Kind::name;
  std::string text;  ///< a string's characters, a name (True), an integer's digits
  std::vector<Literal> items;  ///< a tuple's or list's elements
  char open = '(';  ///< '(' or '[' for a sequence
};

// Python's repr of `value`, for messages: '<f8', (2, 3), True.
std::string repr(const Literal& value) {
  switch (value.kind) {
    case Literal::Kind::string: return "'" + value.text + "'";
    case Literal::Kind::name:
    case Literal::Kind::integer: return value.text;
    case Literal::Kind::sequence: break;
  }
  std::string out(1, value.open);
  for (size_t i = 0; i < value.items.size(); ++i) out += (i ? ", " : "") + repr(value.items[i]);
  if (value.open == '(' && value.items.size() == 1) out += ",";
  return out + (value.open == '(' ? ")" : "]");
}

class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& path) : text_(text), path_(path) {}

  /// The dictionary: each key once, in the header's order.
  std::vector<std::pair<std::string, Literal>> dict() {
    std::vector<std::pair<std::string, Literal>> entries;
    expect('{');
    while (peek() != '}') {
      const Literal key = value();
      if (key.kind != Literal::Kind::string) malformed("a key that is not a string, " + repr(key));
      for (const auto& entry : entries) {
        if (entry.first == key.text) malformed("the key '" + key.text + "' twice");
      }
      expect(':');
      entries.emplace_back(key.text, value());
      if (peek() != ',') break;
      ++pos_;  // a trailing comma is allowed, as in Python
    }
    expect('}');
    if (peek() != '\0') malformed("text after the closing '}'");
    return entries;
  }

 private:
  static constexpr int kMaxDepth = 8;  // a header nests tuples two deep at most

  [[noreturn]] void malformed(const std::string& what) { fail(path_, "malformed header: " + what); }

  // The next character that is not white space ('\0' at the end), not consumed.
  char peek() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }

  void expect(char c) {
    if (peek() != c) malformed(std::string("expected '") + c + "' at character " + std::to_string(pos_));
    ++pos_;
  }

  Literal value(int depth = 0) {
    if (depth > kMaxDepth) malformed("values nested too deep");
    const char c = peek();
    Literal out;
    if (c == '\'' || c == '"') {
      out.kind = Literal::Kind::string;
      ++pos_;
      for (;; ++pos_) {
        if (pos_ >= text_.size()) malformed("a string that does not end");
        if (text_[pos_] == c) break;
        if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;  // \' or \\: the next character as it is
        out.text.push_back(text_[pos_]);
      }
      ++pos_;
    } else if (c == '(' || c == '[') {
      out.kind = Literal::Kind::sequence;
      out.open = c;
      const char close = c == '(' ? ')' : ']';
      ++pos_;
      while (peek() != close) {
        out.items.push_back(value(depth + 1));
        if (peek() != ',') break;
        ++pos_;
      }
      expect(close);
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      out.kind = Literal::Kind::integer;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) out.text += text_[pos_++];
      if (pos_ < text_.size() && std::isalpha(static_cast<unsigned char>(text_[pos_]))) malformed("a bad number");
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      while (pos_ < text_.size() && std::isalnum(static_cast<unsigned char>(text_[pos_]))) out.text += text_[pos_++];
      if (out.text != "True" && out.text != "False" && out.text != "None") malformed("unknown name " + out.text);
    } else {
      malformed(c ? std::string("unexpected '") + c + "' at character " + std::to_string(pos_) : "it ends early");
    }
    return out;
  }

  const std::string& text_;
  const std::string& path_;
  size_t pos_ = 0;
};

// The value of `key` in the header's entries.
const Literal& entry(const std::vector<std::pair<std::string, Literal>>& entries, const std::string& key,
                     const std::string& path) {
  for (const auto& [name, value] : entries) {
    if (name == key) return value;
  }
  fail(path, "header has no '" + key + "' entry");
}

// A shape: a tuple of non-negative integers.
std::vector<int64_t> parse_shape(const Literal& value, const std::string& path) {
  const bool is_tuple = value.kind == Literal::Kind::sequence && value.open == '(';
  std::vector<int64_t> shape;
  for (const Literal& item : value.items) {
    if (!is_tuple || item.kind != Literal::Kind::integer || item.text.size() > 12) break;
    shape.push_back(std::stoll(item.text));
  }
  if (!is_tuple || shape.size() != value.items.size()) fail(path, "malformed shape " + repr(value));
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

  const auto entries = HeaderParser(header, path).dict();
  const Literal& descr = entry(entries, "descr", path);
  if (descr.kind != Literal::Kind::string || descr.text != "<f4") {
    fail(path, "dtype " + repr(descr) + " is not supported; only float32 ('<f4') is");
  }
  const Literal& fortran_order = entry(entries, "fortran_order", path);
  if (fortran_order.kind != Literal::Kind::name || fortran_order.text != "False") {
    fail(path, fortran_order.kind == Literal::Kind::name && fortran_order.text == "True"
                   ? "Fortran-ordered arrays are not supported; save a C-ordered (contiguous) array"
                   : "fortran_order must be True or False, got " + repr(fortran_order));
  }
  NpyArray array;
  array.shape = parse_shape(entry(entries, "shape", path), path);
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
