/// \file io_complexity.cpp
/// \brief Closed-form traffic counts.
#include "common/io_complexity.hpp"

#include <algorithm>

namespace common {

Algorithm1Tiles algorithm1_tiles(int64_t sram_floats, const Shape& s) {
  if (sram_floats < 1) throw InputError("the on-chip budget M must be >= 1 float");
  Algorithm1Tiles t;
  const int64_t b = ceil_div(sram_floats, 4 * s.head_dim);  // ⌈M/4d⌉
  t.Bc = std::min(b, s.seq_kv);
  t.Br = std::min({b, s.head_dim, s.seq_q});
  t.Tc = ceil_div(s.seq_kv, t.Bc);
  t.Tr = ceil_div(s.seq_q, t.Br);
  return t;
}

Traffic algorithm1_traffic(const Shape& s, const Algorithm1Tiles& t) {
  const int64_t nq = s.seq_q, nkv = s.seq_kv, d = s.head_dim;
  const int64_t reads = 2 * nkv * d  // K_j, V_j once each
                        + t.Tc * (2 * nq * d + 2 * nq)  // Q_i, O_i, l_i, m_i per (j, i)
                        + 2 * nq;  // m, l for the final L
  const int64_t writes = (nq * d + 2 * nq)  // O, l, m initialised
                         + t.Tc * (nq * d + 2 * nq)  // O_i, l_i, m_i per (j, i)
                         + nq;  // L
  const int64_t bytes = 4 * s.batch_heads();
  return Traffic{reads * bytes, writes * bytes};
}

Algorithm1Tiles algorithm2_tiles(int64_t sram_floats, const Shape& s) {
  if (sram_floats < 1) throw InputError("the on-chip budget M must be >= 1 float");
  Algorithm1Tiles t;
  const int64_t b = ceil_div(sram_floats, 8 * s.head_dim);  // ⌈M/8d⌉
  t.Bc = std::min(b, s.seq_kv);
  t.Br = std::min({b, s.head_dim, s.seq_q});
  t.Tc = ceil_div(s.seq_kv, t.Bc);
  t.Tr = ceil_div(s.seq_q, t.Br);
  return t;
}

Traffic algorithm2_traffic(const Shape& s, const Algorithm1Tiles& t) {
  const int64_t nq = s.seq_q, nkv = s.seq_kv, d = s.head_dim;
  const int64_t reads = 2 * nq * d  // dO, O for D
                        + 2 * nkv * d  // K_j, V_j once each
                        + t.Tc * (3 * nq * d + 2 * nq);  // Q_i, dO_i, dQ_i, L_i, D_i per (j, i)
  const int64_t writes = nq  // D
                         + nq * d  // dQ = 0
                         + t.Tc * nq * d  // dQ_i per (j, i)
                         + 2 * nkv * d;  // dK_j, dV_j once each
  const int64_t bytes = 4 * s.batch_heads();
  return Traffic{reads * bytes, writes * bytes};
}

Traffic standard_attention_traffic(const Shape& s) {
  const int64_t nq = s.seq_q, nkv = s.seq_kv, d = s.head_dim;
  const int64_t reads = (nq * d + nkv * d) + nq * nkv + (nq * nkv + nkv * d);
  const int64_t writes = nq * nkv + nq * nkv + nq * d;
  const int64_t bytes = 4 * s.batch_heads();
  return Traffic{reads * bytes, writes * bytes};
}

double flash_attention_bound_bytes(const Shape& s, int64_t sram_floats) {
  const double d = double(s.head_dim);
  return 4.0 * double(s.batch_heads()) * double(s.seq_q) * double(s.seq_kv) * d * d / double(sram_floats);
}

}  // namespace common
