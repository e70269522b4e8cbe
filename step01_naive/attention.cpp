/// \file step01_naive/attention.cpp
/// \brief Step 1 — standard attention with Eigen.
///
/// This is the starting point: attention exactly as the formula reads,
///
///     S = scale · Q Kᵀ        (N_q × N_kv, the whole score matrix)
///     m = rowmax(S),  P = exp(S − m),  l = rowsum(P)
///     O = diag(l)⁻¹ P V,      L = m + log(l)
///
/// one (batch, head) at a time. It is correct and, thanks to Eigen's matrix
/// product, not slow — but it materialises S (and P in place of S): N_q·N_kv
/// floats per head, 256 MiB at N = 8192. Step 2 computes the same O and L
/// without ever holding more than one tile of S.
///
/// Run: build/bin/step01_naive --seq-q 1024 --seq-kv 1024 --head-dim 64 --check
#include "attention.hpp"

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <ostream>

#include "common/trace.hpp"
#include "common/workspace.hpp"

namespace step01 {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using MatrixMap = Eigen::Map<RowMatrix>;
using VectorMap = Eigen::Map<Eigen::VectorXf>;

}  // namespace

common::Result attention_forward(const common::Problem& problem, const common::Options& options) {
  common::validate(problem);
  const common::Shape& shape = problem.shape;
  const Eigen::Index n_q = shape.seq_q, n_kv = shape.seq_kv, d = shape.head_dim;
  common::Result result = common::allocate_result(shape);

  // The working memory this step is known for: S (then P, in place), N_q × N_kv.
  common::Workspace<float> s_storage(static_cast<size_t>(n_q * n_kv));
  common::Workspace<float> m_storage(static_cast<size_t>(n_q));  // m: (N_q)
  common::Workspace<float> l_storage(static_cast<size_t>(n_q));  // l: (N_q)
  // O and L of one head are computed here, in aligned working memory, then copied
  // out: Eigen splits a vectorised loop by where the destination's memory starts,
  // and the elements of the split round differently (common/workspace.hpp).
  common::Workspace<float> o_storage(static_cast<size_t>(n_q * d));  // O: (N_q, d)
  common::Workspace<float> lse_storage(static_cast<size_t>(n_q));  // L: (N_q)
  MatrixMap S(s_storage.data(), n_q, n_kv);
  VectorMap m(m_storage.data(), n_q), l(l_storage.data(), n_q);

  for (int64_t bh = 0; bh < shape.batch_heads(); ++bh) {
    ConstMatrixMap Q(problem.q.data() + bh * n_q * d, n_q, d);  // Q: (N_q, d)
    ConstMatrixMap K(problem.k.data() + bh * n_kv * d, n_kv, d);  // K: (N_kv, d)
    ConstMatrixMap V(problem.v.data() + bh * n_kv * d, n_kv, d);  // V: (N_kv, d)
    MatrixMap O(o_storage.data(), n_q, d);  // O: (N_q, d)
    VectorMap L(lse_storage.data(), n_q);  // L: (N_q)

    //! [standard attention]
    // S = scale · Q Kᵀ: one matrix product, the whole N_q × N_kv matrix at once.
    S.noalias() = problem.scale * (Q * K.transpose());
    if (problem.causal) {
      // Top-left aligned mask (PyTorch's convention): query i sees keys j <= i.
      for (Eigen::Index i = 0; i < n_q; ++i) {
        if (i + 1 < n_kv) S.row(i).tail(n_kv - i - 1).setConstant(-std::numeric_limits<float>::infinity());
      }
    }
    // Subtract the row max before exp so that exp never overflows.
    m = S.rowwise().maxCoeff();
    S = (S.colwise() - m).array().exp().matrix();  // P overwrites S
    l = S.rowwise().sum();
    O.noalias() = S * V;
    O = l.cwiseInverse().asDiagonal() * O;  // normalise each row by its l
    L = m.array() + l.array().log();  // L = m + log(l)
    //! [standard attention]
    MatrixMap(result.o.data() + bh * n_q * d, n_q, d) = O;
    VectorMap(result.lse.data() + bh * n_q, n_q) = L;

    if (options.trace) {
      std::ostream& out = *options.trace;
      out << "(b, h) = (" << bh / shape.heads << ", " << bh % shape.heads << ")\n";
      common::print_matrix(out, "P = exp(S - m)", S.data(), n_q, n_kv, n_kv);
      common::print_matrix(out, "m", m.data(), 1, n_q, n_q);
      common::print_matrix(out, "l", l.data(), 1, n_q, n_q);
      common::print_matrix(out, "O", O.data(), n_q, d, d);
      common::print_matrix(out, "L", L.data(), 1, n_q, n_q);
    }
  }
  return result;
}

common::StepInfo describe() {
  common::StepInfo info;
  info.name = "step01_naive";
  info.title = "standard attention with Eigen (materialises S, N_q x N_kv per head)";
  info.forward = [](const common::Problem& p, const common::Options& o) { return attention_forward(p, o); };
  info.has_trace = true;
  info.cpu_flops_per_s = 2e10;  // Eigen's products on one core, measured by cpu_bench
  return info;
}

}  // namespace step01
