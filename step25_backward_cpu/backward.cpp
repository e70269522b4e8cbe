/// \file step25_backward_cpu/backward.cpp
/// \brief Step 25 — the backward pass, FlashAttention-2's Algorithm 2, on the CPU.
///
/// This step extends step 2 (its forward files are step 2's, renamed) by the
/// backward pass: from Q, K, V, the forward's O and L, and dO = ∂loss/∂O it
/// computes dQ, dK and dV without ever holding an N_q × N_kv matrix.
///  1. D = rowsum(dO ∘ O), one number per query row, is computed once and kept
///     in "HBM" beside L: it stands for the row sums of P ∘ dP, which no tile
///     has whole.
///  2. K/V tiles in the outer loop: dK_j and dV_j are accumulated on chip over
///     every Q tile i and written once.
///  3. Q tiles in the inner loop: S_ij is recomputed and P_ij = exp(S_ij − L_i)
///     comes straight from L, with no running max and no rescaling: L is why the
///     forward keeps it.
///  4. dQ_i gets one term per K/V tile, so it is read, added to and written back
///     to "HBM" on every (j, i), and every such byte is counted.
/// The working memory is a few tiles plus D, instead of P's N_q × N_kv.
///
/// Run: build/bin/step25_backward_cpu --seq-q 1024 --seq-kv 1024 --head-dim 64 --backward --check
///      build/bin/step25_backward_cpu --fixture hand_worked_n2_d1 --backward --trace
#include <Eigen/Dense>
#include <cmath>
#include <ostream>

#include "attention.hpp"
#include "common/io_complexity.hpp"
#include "common/progress.hpp"
#include "common/trace.hpp"
#include "common/workspace.hpp"

namespace step25 {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstVectorMap = Eigen::Map<const Eigen::VectorXf>;
using VectorMap = Eigen::Map<Eigen::VectorXf>;

/// A tile buffer in "SRAM": rows × cols floats, counted as working memory.
struct BackwardTile {
  BackwardTile(int64_t rows, int64_t cols) : storage(static_cast<size_t>(rows * cols)), rows(rows), cols(cols) {}
  MatrixMap map() { return MatrixMap(storage.data(), rows, cols); }
  common::Workspace<float> storage;
  int64_t rows, cols;
};

}  // namespace

common::Gradients attention_backward(const common::Problem& problem, const common::BackwardInputs& in,
                                     const common::Options& options) {
  common::validate(problem, in);
  const common::Shape& shape = problem.shape;
  const int64_t n_q = shape.seq_q, n_kv = shape.seq_kv, d = shape.head_dim;
  const int64_t M = common::sram_budget(options, kDefaultSramFloats);

  //! [tile sizes]
  // Line 1: B_c = ⌈M/8d⌉, B_r = min(⌈M/8d⌉, d): four K/V-side tiles on chip instead of two.
  const common::Algorithm1Tiles tiles = common::algorithm2_tiles(M, shape);
  const int64_t Bc = tiles.Bc, Br = tiles.Br, Tc = tiles.Tc, Tr = tiles.Tr;
  //! [tile sizes]

  common::Gradients grads = common::allocate_gradients(shape);
  common::Traffic traffic;
  constexpr int64_t kFloat = sizeof(float);

  // "HBM": D beside L, one number per query row.
  common::Workspace<float> D_hbm(static_cast<size_t>(shape.lse_elements()));  // D: (B, H, N_q)

  // "SRAM": one tile of each operand.
  BackwardTile Kj_t(Bc, d), Vj_t(Bc, d), dKj_t(Bc, d), dVj_t(Bc, d);  // K_j, V_j, dK_j, dV_j: (B_c, d)
  BackwardTile Qi_t(Br, d), dOi_t(Br, d), dQi_t(Br, d);  // Q_i, dO_i, dQ_i: (B_r, d)
  BackwardTile Pij_t(Br, Bc), dSij_t(Br, Bc);  // S_ij → P_ij and dP_ij → dS_ij in place: (B_r, B_c)
  BackwardTile rows_t(2, Br);  // L_i, D_i: (B_r) each
  MatrixMap Kj = Kj_t.map(), Vj = Vj_t.map(), dKj = dKj_t.map(), dVj = dVj_t.map();
  MatrixMap Qi = Qi_t.map(), dOi = dOi_t.map(), dQi = dQi_t.map();
  MatrixMap Pij = Pij_t.map(), dSij = dSij_t.map();
  VectorMap Li(rows_t.storage.data(), Br), Di(Li.data() + Br, Br);

  std::ostream* trace = options.trace;
  if (trace) {
    *trace << "Algorithm 2 with M = " << M << ": B_c = " << Bc << ", B_r = " << Br << ", T_c = " << Tc
           << ", T_r = " << Tr << "\n";
  }
  common::Progress progress(options.progress, shape.batch_heads() * Tc * Tr);  // one unit per (j, i)

  for (int64_t bh = 0; bh < shape.batch_heads(); ++bh) {
    ConstMatrixMap Q(problem.q.data() + bh * n_q * d, n_q, d);  // Q: (N_q, d) in HBM
    ConstMatrixMap K(problem.k.data() + bh * n_kv * d, n_kv, d);  // K: (N_kv, d) in HBM
    ConstMatrixMap V(problem.v.data() + bh * n_kv * d, n_kv, d);  // V: (N_kv, d) in HBM
    ConstMatrixMap O(in.o.data() + bh * n_q * d, n_q, d);  // O: (N_q, d) in HBM
    ConstMatrixMap dO(in.d_o.data() + bh * n_q * d, n_q, d);  // dO: (N_q, d) in HBM
    ConstVectorMap L(in.lse.data() + bh * n_q, n_q);  // L: (N_q) in HBM
    MatrixMap dQ(grads.dq.data() + bh * n_q * d, n_q, d);  // dQ: (N_q, d) in HBM
    MatrixMap dK(grads.dk.data() + bh * n_kv * d, n_kv, d);  // dK: (N_kv, d) in HBM
    MatrixMap dV(grads.dv.data() + bh * n_kv * d, n_kv, d);  // dV: (N_kv, d) in HBM
    VectorMap D(D_hbm.data() + bh * n_q, n_q);  // D: (N_q) in HBM

    //! [D and dQ]
    // Line 4: D = rowsum(dO ∘ O). For every row, Σ_j P_ij dP_ij = dO_i · Σ_j P_ij V_j = dO_i · O_i:
    // the row sum that dS needs, from two rows of d numbers instead of a whole row of P.
    D = dO.cwiseProduct(O).rowwise().sum();
    traffic.hbm_read_bytes += 2 * n_q * d * kFloat;
    traffic.hbm_write_bytes += n_q * kFloat;
    // Line 3: dQ = 0 in HBM; every K/V tile adds its term to it.
    dQ.setZero();
    traffic.hbm_write_bytes += n_q * d * kFloat;
    //! [D and dQ]
    if (trace) common::print_matrix(*trace, "D", D.data(), 1, n_q, n_q, 0);

    //! [algorithm 2]
    for (int64_t j = 0; j < Tc; ++j) {  // line 5: K/V tiles, outer loop
      const int64_t kv0 = j * Bc, cols = std::min(Bc, n_kv - kv0);  // the last tile may be short
      // Line 6: load K_j, V_j from HBM to SRAM. Line 7: dK_j = 0, dV_j = 0 on chip.
      Kj.topRows(cols) = K.middleRows(kv0, cols);
      Vj.topRows(cols) = V.middleRows(kv0, cols);
      traffic.hbm_read_bytes += 2 * cols * d * kFloat;
      dKj.topRows(cols).setZero();
      dVj.topRows(cols).setZero();

      for (int64_t i = 0; i < Tr; ++i) {  // line 8: Q tiles, inner loop
        const int64_t q0 = i * Br, rows = std::min(Br, n_q - q0);
        // Line 9: load Q_i, dO_i, dQ_i, L_i, D_i from HBM to SRAM.
        Qi.topRows(rows) = Q.middleRows(q0, rows);
        dOi.topRows(rows) = dO.middleRows(q0, rows);
        dQi.topRows(rows) = dQ.middleRows(q0, rows);
        Li.head(rows) = L.segment(q0, rows);
        Di.head(rows) = D.segment(q0, rows);
        traffic.hbm_read_bytes += (3 * rows * d + 2 * rows) * kFloat;

        // Line 10: S_ij = scale · Q_i K_jᵀ. Line 11: P_ij = exp(S_ij − L_i), masked entries 0.
        // L_i is the row's final log-sum-exp, so P_ij is the softmax itself: no max, no rescale.
        auto P = Pij.topLeftCorner(rows, cols);
        P.noalias() = problem.scale * (Qi.topRows(rows) * Kj.topRows(cols).transpose());
        if (trace) {
          *trace << "j = " << j << ", i = " << i << "\n";
          common::print_matrix(*trace, "S_ij", P.data(), rows, cols, Bc);
        }
        P = (P.array().colwise() - Li.head(rows).array()).exp().matrix();
        if (problem.causal) {
          // Query q0 + r sees keys up to q0 + r: the rest of its row of P is 0.
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t first_hidden = std::max<int64_t>(q0 + r + 1 - kv0, 0);
            if (first_hidden < cols) P.row(r).tail(cols - first_hidden).setZero();
          }
        }

        // Line 12: dV_j ← dV_j + P_ijᵀ dO_i.
        dVj.topRows(cols).noalias() += P.transpose() * dOi.topRows(rows);
        // Line 13: dP_ij = dO_i V_jᵀ. Line 14: dS_ij = P_ij ∘ (dP_ij − D_i), in place.
        auto dS = dSij.topLeftCorner(rows, cols);
        dS.noalias() = dOi.topRows(rows) * Vj.topRows(cols).transpose();
        if (trace) common::print_matrix(*trace, "dP_ij", dS.data(), rows, cols, Bc);
        dS = P.cwiseProduct((dS.array().colwise() - Di.head(rows).array()).matrix());

        // Line 15: dQ_i ← dQ_i + scale · dS_ij K_j, written back to HBM (read in line 9).
        dQi.topRows(rows).noalias() += problem.scale * (dS * Kj.topRows(cols));
        dQ.middleRows(q0, rows) = dQi.topRows(rows);
        traffic.hbm_write_bytes += rows * d * kFloat;
        // Line 16: dK_j ← dK_j + scale · dS_ijᵀ Q_i.
        dKj.topRows(cols).noalias() += problem.scale * (dS.transpose() * Qi.topRows(rows));

        if (trace) {
          common::print_matrix(*trace, "P_ij", P.data(), rows, cols, Bc);
          common::print_matrix(*trace, "dS_ij", dS.data(), rows, cols, Bc);
          common::print_matrix(*trace, "dQ_i (written)", dQi.data(), rows, d, d);
          common::print_matrix(*trace, "dK_j", dKj.data(), cols, d, d);
          common::print_matrix(*trace, "dV_j", dVj.data(), cols, d, d);
        }
        progress.update((bh * Tc + j) * Tr + i + 1);
      }
      // Line 18: write dK_j, dV_j to HBM, once per K/V tile.
      dK.middleRows(kv0, cols) = dKj.topRows(cols);
      dV.middleRows(kv0, cols) = dVj.topRows(cols);
      traffic.hbm_write_bytes += 2 * cols * d * kFloat;
    }
    //! [algorithm 2]
    if (trace) {
      common::print_matrix(*trace, "dQ", dQ.data(), n_q, d, d, 0);
      common::print_matrix(*trace, "dK", dK.data(), n_kv, d, d, 0);
      common::print_matrix(*trace, "dV", dV.data(), n_kv, d, d, 0);
    }
  }

  grads.traffic = traffic;
  const common::Traffic closed = common::algorithm2_traffic(shape, tiles);
  grads.extra = {{"B_c", double(Bc)},
                 {"B_r", double(Br)},
                 {"sram_floats", double(M)},
                 {"closed_form_read_bytes", double(closed.hbm_read_bytes)},
                 {"closed_form_write_bytes", double(closed.hbm_write_bytes)}};
  return grads;
}

}  // namespace step25
