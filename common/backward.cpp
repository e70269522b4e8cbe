/// \file backward.cpp
/// \brief The backward contract: gradient allocation, input validation, FLOPs.
#include "common/backward.hpp"

#include <cmath>
#include <limits>
#include <string>

namespace common {

Gradients allocate_gradients(const Shape& shape) {
  Gradients g;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  g.dq.assign(static_cast<size_t>(shape.q_elements()), nan);
  g.dk.assign(static_cast<size_t>(shape.kv_elements()), nan);
  g.dv.assign(static_cast<size_t>(shape.kv_elements()), nan);
  return g;
}

int64_t count_nonfinite(const Gradients& g) {
  int64_t n = 0;
  for (const auto* t : {&g.dq, &g.dk, &g.dv}) {
    for (float x : *t) n += std::isfinite(x) ? 0 : 1;
  }
  return n;
}

namespace {

void require_length(const std::vector<float>& t, int64_t expected, const char* name) {
  if (static_cast<int64_t>(t.size()) != expected) {
    throw InputError(std::string(name) + " has " + std::to_string(t.size()) + " elements but the shape needs " +
                     std::to_string(expected));
  }
}

}  // namespace

void validate(const Problem& problem, const BackwardInputs& in) {
  validate(problem);
  const Shape& s = problem.shape;
  require_length(in.o, s.q_elements(), "O");
  require_length(in.lse, s.lse_elements(), "L");
  require_length(in.d_o, s.q_elements(), "dO");
  require_finite(in.o, s, s.seq_q, "O");
  // L is (B, H, N_q): one "column" per row, so its index reads [b, h, n, c=0].
  require_finite(in.lse, Shape{s.batch, s.heads, s.seq_q, s.seq_kv, 1}, s.seq_q, "L");
  require_finite(in.d_o, s, s.seq_q, "dO");
}

}  // namespace common
