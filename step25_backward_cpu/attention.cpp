/// \file step25_backward_cpu/attention.cpp
/// \brief Step 25 — step 2's forward: FlashAttention-1, Algorithm 1, on the CPU (the backward is in backward.cpp).
///
/// Step 2 improves on step 1 by never materialising S. Instead:
///  1. K and V are cut into T_c tiles of B_c rows, Q into T_r tiles of B_r rows,
///     sized from an on-chip budget of M floats (B_c = ⌈M/4d⌉, B_r = min(B_c, d)).
///  2. For every K/V tile j (outer loop) and Q tile i (inner loop), the scores
///     S_ij of one tile are computed, and the softmax is folded into running
///     statistics: the row max m and the row sum l (the "online softmax").
///  3. O, l and m live in full-size arrays that stand for the GPU's HBM: they are
///     loaded and written back on every (j, i), exactly as the paper's lines 8
///     and 12–13 say, and every such byte is counted.
/// The working memory is a few tiles plus l and m, instead of N_q × N_kv.
///
/// Run: build/bin/step25_backward_cpu --seq-q 4096 --seq-kv 4096 --head-dim 64 --check
///      build/bin/step25_backward_cpu --seq-q 2 --seq-kv 2 --head-dim 1 --heads 1 --sram-floats 2 --trace
#include "attention.hpp"

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <ostream>

#include "common/io_complexity.hpp"
#include "common/progress.hpp"
#include "common/trace.hpp"
#include "common/workspace.hpp"

namespace step25 {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using MatrixMap = Eigen::Map<RowMatrix>;
using VectorMap = Eigen::Map<Eigen::VectorXf>;

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

/// A tile buffer in "SRAM": rows × cols floats, counted as working memory.
struct Tile {
  Tile(int64_t rows, int64_t cols) : storage(static_cast<size_t>(rows * cols)), rows(rows), cols(cols) {}
  MatrixMap map() { return MatrixMap(storage.data(), rows, cols); }
  common::Workspace<float> storage;
  int64_t rows, cols;
};

}  // namespace

common::Result attention_forward(const common::Problem& problem, const common::Options& options) {
  common::validate(problem);
  const common::Shape& shape = problem.shape;
  const int64_t n_q = shape.seq_q, n_kv = shape.seq_kv, d = shape.head_dim;
  const int64_t M = common::sram_budget(options, kDefaultSramFloats);

  //! [tile sizes]
  // Line 1: B_c = ⌈M/4d⌉, B_r = min(⌈M/4d⌉, d); T_c, T_r tiles cover K/V and Q.
  const common::Algorithm1Tiles tiles = common::algorithm1_tiles(M, shape);
  const int64_t Bc = tiles.Bc, Br = tiles.Br, Tc = tiles.Tc, Tr = tiles.Tr;
  //! [tile sizes]

  common::Result result = common::allocate_result(shape);
  common::Traffic traffic;
  constexpr int64_t kFloat = sizeof(float);

  // "HBM": l and m, full size, beside O (the output array itself).
  common::Workspace<float> l_hbm(static_cast<size_t>(shape.lse_elements()));  // l: (B, H, N_q)
  common::Workspace<float> m_hbm(static_cast<size_t>(shape.lse_elements()));  // m: (B, H, N_q)

  // "SRAM": one tile of each operand.
  Tile Kj_t(Bc, d), Vj_t(Bc, d);  // K_j, V_j: (B_c, d)
  Tile Qi_t(Br, d), Oi_t(Br, d);  // Q_i, O_i: (B_r, d)
  Tile Sij_t(Br, Bc);  // S_ij, then P̃_ij in place: (B_r, B_c)
  Tile PV_t(Br, d);  // P̃_ij V_j: (B_r, d)
  Tile rows_t(6, Br);  // l_i, m_i, m̃_ij, l̃_ij, m_i^new, l_i^new: (B_r) each
  MatrixMap Kj = Kj_t.map(), Vj = Vj_t.map(), Qi = Qi_t.map(), Oi = Oi_t.map();
  MatrixMap Sij = Sij_t.map(), PV = PV_t.map();
  VectorMap li(rows_t.storage.data(), Br), mi(li.data() + Br, Br), mij(mi.data() + Br, Br), lij(mij.data() + Br, Br),
      mi_new(lij.data() + Br, Br), li_new(mi_new.data() + Br, Br);

  std::ostream* trace = options.trace;
  if (trace) {
    *trace << "Algorithm 1 with M = " << M << ": B_c = " << Bc << ", B_r = " << Br << ", T_c = " << Tc
           << ", T_r = " << Tr << "\n";
  }
  common::Progress progress(options.progress, shape.batch_heads() * Tc * Tr);  // one unit per (j, i)

  for (int64_t bh = 0; bh < shape.batch_heads(); ++bh) {
    ConstMatrixMap Q(problem.q.data() + bh * n_q * d, n_q, d);  // Q: (N_q, d) in HBM
    ConstMatrixMap K(problem.k.data() + bh * n_kv * d, n_kv, d);  // K: (N_kv, d) in HBM
    ConstMatrixMap V(problem.v.data() + bh * n_kv * d, n_kv, d);  // V: (N_kv, d) in HBM
    MatrixMap O(result.o.data() + bh * n_q * d, n_q, d);  // O: (N_q, d) in HBM
    VectorMap l(l_hbm.data() + bh * n_q, n_q);  // l: (N_q) in HBM
    VectorMap m(m_hbm.data() + bh * n_q, n_q);  // m: (N_q) in HBM

    // Line 2: O = 0, l = 0, m = −∞ in HBM.
    O.setZero();
    l.setZero();
    m.setConstant(kMinusInf);
    traffic.hbm_write_bytes += (n_q * d + 2 * n_q) * kFloat;

    //! [algorithm 1]
    for (int64_t j = 0; j < Tc; ++j) {  // line 5: K/V tiles, outer loop
      const int64_t kv0 = j * Bc, cols = std::min(Bc, n_kv - kv0);  // the last tile may be short
      // Line 6: load K_j, V_j from HBM to SRAM.
      Kj.topRows(cols) = K.middleRows(kv0, cols);
      Vj.topRows(cols) = V.middleRows(kv0, cols);
      traffic.hbm_read_bytes += 2 * cols * d * kFloat;

      for (int64_t i = 0; i < Tr; ++i) {  // line 7: Q tiles, inner loop
        const int64_t q0 = i * Br, rows = std::min(Br, n_q - q0);
        // Line 8: load Q_i, O_i, l_i, m_i from HBM to SRAM.
        Qi.topRows(rows) = Q.middleRows(q0, rows);
        Oi.topRows(rows) = O.middleRows(q0, rows);
        li.head(rows) = l.segment(q0, rows);
        mi.head(rows) = m.segment(q0, rows);
        traffic.hbm_read_bytes += (2 * rows * d + 2 * rows) * kFloat;

        auto S = Sij.topLeftCorner(rows, cols);
        // Line 9: S_ij = scale · Q_i K_jᵀ.
        S.noalias() = problem.scale * (Qi.topRows(rows) * Kj.topRows(cols).transpose());
        if (problem.causal) {
          // Query q0 + r sees keys up to q0 + r: mask the rest of its row.
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t first_hidden = std::max<int64_t>(q0 + r + 1 - kv0, 0);
            if (first_hidden < cols) S.row(r).tail(cols - first_hidden).setConstant(kMinusInf);
          }
        }
        if (trace) {
          *trace << "j = " << j << ", i = " << i << "\n";
          common::print_matrix(*trace, "K_j", Kj.data(), cols, d, d);
          common::print_matrix(*trace, "V_j", Vj.data(), cols, d, d);
          common::print_matrix(*trace, "Q_i", Qi.data(), rows, d, d);
          common::print_matrix(*trace, "O_i", Oi.data(), rows, d, d);
          common::print_matrix(*trace, "m_i", mi.data(), 1, rows, rows);
          common::print_matrix(*trace, "l_i", li.data(), 1, rows, rows);
          common::print_matrix(*trace, "S_ij", S.data(), rows, cols, Bc);
        }

        // Line 10: m̃_ij = rowmax(S_ij), P̃_ij = exp(S_ij − m̃_ij), l̃_ij = rowsum(P̃_ij).
        // A causal row can be fully masked in this tile (m̃_ij = −∞): its P̃ is 0.
        // (Every row sees key 0 in tile j = 0, so m_i is finite from then on.)
        auto m_tilde = mij.head(rows);
        m_tilde = S.rowwise().maxCoeff();
        for (int64_t r = 0; r < rows; ++r) {
          if (m_tilde(r) == kMinusInf) {
            S.row(r).setZero();
          } else {
            S.row(r) = (S.row(r).array() - m_tilde(r)).exp().matrix();
          }
        }
        lij.head(rows) = S.rowwise().sum();

        // Line 11: m_i^new = max(m_i, m̃_ij), l_i^new = e^(m_i − m_i^new) l_i + e^(m̃_ij − m_i^new) l̃_ij.
        mi_new.head(rows) = mi.head(rows).cwiseMax(m_tilde);
        const Eigen::ArrayXf alpha = (mi.head(rows) - mi_new.head(rows)).array().exp();  // rescales the old
        const Eigen::ArrayXf beta = (m_tilde - mi_new.head(rows)).array().exp();  // rescales the new
        li_new.head(rows) = (alpha * li.head(rows).array() + beta * lij.head(rows).array()).matrix();

        // Line 12: O_i ← diag(l_i^new)⁻¹ (diag(l_i) e^(m_i − m_i^new) O_i + e^(m̃_ij − m_i^new) P̃_ij V_j).
        // The two diagonal matrices are formed first, one number per row, so a row
        // with nothing new in this tile gets exactly the factors 1 and 0 and its O_i
        // is not rounded again (l_i / l_i = 1 exactly in floating point).
        const Eigen::ArrayXf keep = alpha * li.head(rows).array() / li_new.head(rows).array();
        const Eigen::ArrayXf add = beta / li_new.head(rows).array();
        PV.topRows(rows).noalias() = S * Vj.topRows(cols);
        Oi.topRows(rows) = keep.matrix().asDiagonal() * Oi.topRows(rows) + add.matrix().asDiagonal() * PV.topRows(rows);

        // Lines 12–13: write O_i, l_i, m_i back to HBM.
        O.middleRows(q0, rows) = Oi.topRows(rows);
        l.segment(q0, rows) = li_new.head(rows);
        m.segment(q0, rows) = mi_new.head(rows);
        traffic.hbm_write_bytes += (rows * d + 2 * rows) * kFloat;

        if (trace) {
          common::print_matrix(*trace, "m~_ij", mij.data(), 1, rows, rows);
          common::print_matrix(*trace, "P~_ij", S.data(), rows, cols, Bc);
          common::print_matrix(*trace, "l~_ij", lij.data(), 1, rows, rows);
          common::print_matrix(*trace, "m_i^new", mi_new.data(), 1, rows, rows);
          common::print_matrix(*trace, "l_i^new", li_new.data(), 1, rows, rows);
          common::print_matrix(*trace, "O_i (written)", Oi.data(), rows, d, d);
        }
        progress.update((bh * Tc + j) * Tr + i + 1);
      }
    }
    //! [algorithm 1]

    //! [logsumexp]
    // The log-sum-exp of each score row, kept for the backward pass: L = m + log(l).
    VectorMap L(result.lse.data() + bh * n_q, n_q);
    L = (m.array() + l.array().log()).eval();  // into an aligned temporary first: see common/workspace.hpp
    traffic.hbm_read_bytes += 2 * n_q * kFloat;
    traffic.hbm_write_bytes += n_q * kFloat;
    //! [logsumexp]
    if (trace) {
      common::print_matrix(*trace, "O", O.data(), n_q, d, d, 0);
      common::print_matrix(*trace, "L", L.data(), 1, n_q, n_q, 0);
    }
  }

  result.traffic = traffic;
  const common::Traffic closed = common::algorithm1_traffic(shape, tiles);
  const common::Traffic standard = common::standard_attention_traffic(shape);
  result.extra = {{"B_c", double(Bc)},
                  {"B_r", double(Br)},
                  {"sram_floats", double(M)},
                  {"closed_form_read_bytes", double(closed.hbm_read_bytes)},
                  {"closed_form_write_bytes", double(closed.hbm_write_bytes)},
                  {"paper_bound_bytes", common::flash_attention_bound_bytes(shape, M)},
                  {"standard_attention_bytes", double(standard.hbm_read_bytes + standard.hbm_write_bytes)}};
  return result;
}

common::StepInfo describe() {
  common::StepInfo info;
  info.name = "step25_backward_cpu";
  info.title = "the backward pass, FlashAttention-2 Algorithm 2, on the CPU (dK_j, dV_j on chip, dQ in HBM)";
  info.forward = [](const common::Problem& p, const common::Options& o) { return attention_forward(p, o); };
  info.backward = [](const common::Problem& p, const common::BackwardInputs& in, const common::Options& o) {
    return attention_backward(p, in, o);
  };
  info.extends = "step02_tiled_cpu";
  info.uses_sram_budget = true;
  info.default_sram_floats = kDefaultSramFloats;
  info.has_trace = true;
  info.cpu_flops_per_s = 4e10;  // Eigen's products on one core, measured by cpu_bench
  return info;
}

}  // namespace step25
