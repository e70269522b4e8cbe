/// \file problem.cpp
/// \brief Shape validation and result allocation.
#include "common/problem.hpp"

#include <cmath>
#include <limits>
#include <sstream>

namespace common {

std::string describe(const Shape& s) {
  std::ostringstream out;
  out << "B=" << s.batch << " H=" << s.heads << " N_q=" << s.seq_q << " N_kv=" << s.seq_kv << " d=" << s.head_dim;
  return out.str();
}

float default_scale(int64_t head_dim) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))); }

namespace {

void require_positive(int64_t value, const char* name) {
  if (value < 1) {
    throw InputError(std::string(name) + " must be >= 1 (got " + std::to_string(value) + ")");
  }
}

// a * b without overflow, or an InputError naming the tensor.
int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  if (a > kMaxTensorElements / b) {
    throw InputError(std::string(what) + " would have more than 2^31-1 elements; use smaller sizes");
  }
  return a * b;
}

void require_size(const std::vector<float>& t, int64_t expected, const char* name) {
  if (static_cast<int64_t>(t.size()) != expected) {
    throw InputError(std::string(name) + " has " + std::to_string(t.size()) + " elements but the shape needs " +
                     std::to_string(expected));
  }
}

}  // namespace

void validate(const Shape& s) {
  require_positive(s.batch, "batch");
  require_positive(s.heads, "heads");
  require_positive(s.seq_q, "seq_q");
  require_positive(s.seq_kv, "seq_kv");
  require_positive(s.head_dim, "head_dim");
  const int64_t bh = checked_mul(s.batch, s.heads, "batch*heads");
  checked_mul(checked_mul(bh, s.seq_q, "Q"), s.head_dim, "Q");
  checked_mul(checked_mul(bh, s.seq_kv, "K"), s.head_dim, "K");
}

std::string element_index(const Shape& s, int64_t seq, int64_t element) {
  const int64_t c = element % s.head_dim, row = element / s.head_dim;
  const int64_t n = row % seq, bh = row / seq;
  std::ostringstream out;
  out << "[b=" << bh / s.heads << ", h=" << bh % s.heads << ", n=" << n << ", c=" << c << "]";
  return out.str();
}

std::string non_finite_message(float value, int64_t element, const Shape& s, int64_t seq, const std::string& tensor) {
  std::ostringstream out;
  out << tensor << " holds " << value << " at " << element_index(s, seq, element) << "; inputs must be finite numbers";
  return out.str();
}

void require_finite(const std::vector<float>& data, const Shape& s, int64_t seq, const std::string& tensor) {
  for (size_t e = 0; e < data.size(); ++e) {
    if (!std::isfinite(data[e])) throw InputError(non_finite_message(data[e], int64_t(e), s, seq, tensor));
  }
}

namespace {

// "[2, 4, 100, 64]"
std::string dims_text(const std::vector<int64_t>& dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

}  // namespace

Shape shape_of(const std::vector<int64_t>& q, const std::vector<int64_t>& k, const std::vector<int64_t>& v,
               const std::vector<std::string>& names) {
  const std::vector<int64_t>* dims[] = {&q, &k, &v};
  for (int i = 0; i < 3; ++i) {
    if (dims[i]->size() != 4) {
      throw InputError(names[i] + ": expected 4 dimensions [B, H, N, d], got " + std::to_string(dims[i]->size()) + " " +
                       dims_text(*dims[i]));
    }
  }
  if (k != v) {
    throw InputError(names[1] + " and " + names[2] + " must have the same shape (got " + dims_text(k) + " and " +
                     dims_text(v) + ")");
  }
  if (q[0] != k[0] || q[1] != k[1] || q[3] != k[3]) {
    throw InputError(names[0] + " and " + names[1] + " must agree in B, H and d (got " + dims_text(q) + " and " +
                     dims_text(k) + ")");
  }
  const Shape shape{q[0], q[1], q[2], k[2], q[3]};
  validate(shape);
  return shape;
}

void validate(const Problem& p) {
  const Shape& s = p.shape;
  validate(s);
  if (!std::isfinite(p.scale)) throw InputError("scale must be a finite number");
  require_size(p.q, s.q_elements(), "Q");
  require_size(p.k, s.kv_elements(), "K");
  require_size(p.v, s.kv_elements(), "V");
  require_finite(p.q, s, s.seq_q, "Q");
  require_finite(p.k, s, s.seq_kv, "K");
  require_finite(p.v, s, s.seq_kv, "V");
}

void require_head_dim(int64_t head_dim, const std::vector<int64_t>& supported, const std::string& step_name) {
  if (supported.empty()) return;
  for (int64_t d : supported) {
    if (d == head_dim) return;
  }
  std::ostringstream out;
  out << step_name << " does not support head_dim " << head_dim << " (supported:";
  for (int64_t d : supported) out << ' ' << d;
  out << ")";
  throw InputError(out.str());
}

Result allocate_result(const Shape& shape) {
  Result r;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  r.o.assign(static_cast<size_t>(shape.q_elements()), nan);
  r.lse.assign(static_cast<size_t>(shape.lse_elements()), nan);
  return r;
}

}  // namespace common
