/// \file io_complexity.hpp
/// \brief FlashAttention-1's tile sizes and the closed-form HBM traffic of Algorithm 1.
///
/// These formulas count; they do not compute attention. Steps 2 and 3 count
/// every load and store as they make it, and their tests compare those counts
/// with the closed forms here.
#pragma once

#include <cstdint>

#include "common/problem.hpp"

namespace common {

/// ⌈a / b⌉ for positive integers.
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The tiles of Algorithm 1 for an on-chip budget of M floats (line 1 of the
/// paper): B_c = ⌈M/4d⌉, B_r = min(⌈M/4d⌉, d), so that K_j, V_j, Q_i and O_i
/// together take about M floats. A tile is never longer than the sequence it
/// tiles. T_c = ⌈N_kv/B_c⌉ and T_r = ⌈N_q/B_r⌉ tiles cover K/V and Q.
struct Algorithm1Tiles {
  int64_t Bc = 1;  ///< rows of K_j and V_j
  int64_t Br = 1;  ///< rows of Q_i and O_i
  int64_t Tc = 1;  ///< number of K/V tiles
  int64_t Tr = 1;  ///< number of Q tiles
};

/// Tile sizes from the budget `sram_floats` (M) for `shape`. Throws InputError for M < 1.
Algorithm1Tiles algorithm1_tiles(int64_t sram_floats, const Shape& shape);

/// HBM traffic of Algorithm 1 as the paper writes it, in closed form:
/// - line 2 writes O, l, m once (initialisation);
/// - line 6 reads every K_j, V_j once: 2·N_kv·d;
/// - line 8 reads Q_i, O_i, l_i, m_i for every (j, i): T_c·(2·N_q·d + 2·N_q);
/// - lines 12–13 write O_i, l_i, m_i for every (j, i): T_c·(N_q·d + 2·N_q);
/// - the final L = m + log l reads m, l and writes L: 2·N_q and N_q.
/// All times B·H heads and 4 bytes per float.
Traffic algorithm1_traffic(const Shape& shape, const Algorithm1Tiles& tiles);

/// The tiles of the backward pass (FlashAttention-2's Algorithm 2) for a budget of
/// M floats: B_c = ⌈M/8d⌉, B_r = min(⌈M/8d⌉, d). The backward keeps four K/V-side
/// tiles on chip (K_j, V_j, dK_j, dV_j: half of M) beside three Q-side tiles
/// (Q_i, dO_i, dQ_i) and two score tiles (S_ij → P_ij, dP_ij → dS_ij), at most
/// 9M/8 floats in all, as Algorithm 1's tiles take up to 5M/4.
Algorithm1Tiles algorithm2_tiles(int64_t sram_floats, const Shape& shape);

/// HBM traffic of the backward pass as step 25 runs Algorithm 2, in closed form:
/// - D = rowsum(dO ∘ O) reads dO and O once and writes D: 2·N_q·d and N_q;
/// - dQ = 0 is written once: N_q·d;
/// - line 6 reads every K_j, V_j once: 2·N_kv·d;
/// - line 9 reads Q_i, dO_i, dQ_i, L_i, D_i for every (j, i): T_c·(3·N_q·d + 2·N_q);
/// - line 15 writes dQ_i back for every (j, i): T_c·N_q·d;
/// - line 18 writes every dK_j, dV_j once: 2·N_kv·d.
/// All times B·H heads and 4 bytes per float.
Traffic algorithm2_traffic(const Shape& shape, const Algorithm1Tiles& tiles);

/// Standard attention's HBM traffic (the paper's Algorithm 0): read Q, K, write
/// S; read S, write P; read P, V, write O — Θ(N·d + N²) per head, in bytes.
Traffic standard_attention_traffic(const Shape& shape);

/// The paper's bound for FlashAttention, N_q·N_kv·d²/M elements per head
/// (Θ(N²d²/M)), in bytes, for comparison with the counted traffic.
double flash_attention_bound_bytes(const Shape& shape, int64_t sram_floats);

}  // namespace common
