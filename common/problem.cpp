/// \file problem.cpp
/// \brief Shape validation and result allocation.
#include "common/problem.hpp"

#include <cmath>
#include <limits>
#include <sstream>

namespace common {

std::string describe(const Shape& s) {
  std::ostringstream out;
  out << "B=" << s.batch << " H=" << s.heads << " N_q=" << s.seq_q << " N_kv=" << s.seq_kv
      << " d=" << s.head_dim;
  return out.str();
}

float default_scale(int64_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

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
    throw InputError(std::string(name) + " has " + std::to_string(t.size()) +
                     " elements but the shape needs " + std::to_string(expected));
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

void validate(const Problem& p) {
  const Shape& s = p.shape;
  validate(s);
  if (!std::isfinite(p.scale)) throw InputError("scale must be a finite number");
  require_size(p.q, s.q_elements(), "Q");
  require_size(p.k, s.kv_elements(), "K");
  require_size(p.v, s.kv_elements(), "V");
}

void require_head_dim(int64_t head_dim, const std::vector<int64_t>& supported,
                      const std::string& step_name) {
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
