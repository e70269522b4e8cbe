/// \file fragments.hpp
/// \brief Which lane of a warp holds which element of a tensor-core operand:
/// `mma.sync.aligned.m16n8k16` with bf16/fp16 inputs and fp32 accumulators, and
/// `ldmatrix.sync.aligned.m8n8.x4.b16`.
///
/// A warp-wide matrix multiply-accumulate D = A·B + C spreads its operands over
/// the 32 lanes' registers in a fixed pattern (PTX ISA, "Matrix Fragments for
/// mma.m16n8k16 with floating point type"). A kernel never names that pattern
/// directly, but every line that masks a score, takes a row maximum or writes O
/// depends on it, so it is written once here, as plain arithmetic, and tested on
/// the CPU (tests/common/test_precision.cpp) against the ISA's tables. With
///   group = lane / 4  (0..7, "groupID")   and   quad = lane % 4  (0..3, "threadID_in_group"):
///
/// - A, 16×16, row-major, 8 elements a0..a7 in four 32-bit registers:
///   row = group (+8 for a2, a3, a6, a7), col = 2·quad + (i & 1) (+8 for a4..a7);
/// - B, 16×8 (K × N), 4 elements b0..b3 in two registers:
///   row = 2·quad + (i & 1) (+8 for b2, b3), col = group;
/// - C and D, 16×8, fp32, 4 elements c0..c3:
///   row = group (+8 for c2, c3), col = 2·quad + (i & 1).
///
/// Two consequences FlashAttention-2's kernels rely on, both tested:
/// each row of C lives in the 4 lanes of one quad (a row maximum or sum needs
/// two shuffles, `__shfl_xor_sync` over lane bits 0 and 1), and the C fragments
/// of two neighbouring 16×8 tiles of S are, element for element, the A fragment
/// of the 16×16 tile of P̃ they form — P̃ goes from one mma to the next without
/// leaving the registers.
///
/// Hopper's warpgroup MMA repeats these layouts once per warp: wgmma.hpp.
///
/// Header-only, no CUDA types: the same functions compile for the GPU (nvcc)
/// and for the CPU tests.
#pragma once

/// Marks the layout functions callable from device code under nvcc and plain
/// functions in host-only builds.
#if defined(__CUDACC__)
#define FLASH_HOST_DEVICE __host__ __device__
#else
#define FLASH_HOST_DEVICE
#endif

namespace common::mma {

/// A position in a matrix: row, column.
struct RowCol {
  int row;  ///< row
  int col;  ///< column
};

/// Element `i` (0..7) of `lane`'s A fragment of m16n8k16: its place in the 16×16 A.
FLASH_HOST_DEVICE constexpr RowCol a_m16k16(int lane, int i) {
  return {lane / 4 + 8 * ((i / 2) % 2), 2 * (lane % 4) + i % 2 + 8 * (i / 4)};
}

/// Element `i` (0..3) of `lane`'s B fragment of m16n8k16: its place in the 16×8 B (K × N).
FLASH_HOST_DEVICE constexpr RowCol b_k16n8(int lane, int i) { return {2 * (lane % 4) + i % 2 + 8 * (i / 2), lane / 4}; }

/// Element `i` (0..3) of `lane`'s C or D fragment of m16n8k16: its place in the 16×8 C.
FLASH_HOST_DEVICE constexpr RowCol c_m16n8(int lane, int i) { return {lane / 4 + 8 * (i / 2), 2 * (lane % 4) + i % 2}; }

/// `ldmatrix` (m8n8, b16): element `half` (0, 1) of the 32-bit register that
/// `lane` receives from one 8×8 matrix whose 8 rows were addressed by lanes
/// 8r..8r+7: row lane/4, columns 2·(lane%4) and +1; with `.trans`, the
/// transpose of that place.
FLASH_HOST_DEVICE constexpr RowCol ldmatrix_m8n8(int lane, int half, bool trans) {
  return trans ? RowCol{2 * (lane % 4) + half, lane / 4} : RowCol{lane / 4, 2 * (lane % 4) + half};
}

/// With `ldmatrix .x4` over a 16×16 tile, the row and first column `lane`
/// addresses so that its registers 0..3 receive the quadrants top-left,
/// bottom-left, top-right, bottom-right: exactly an A fragment (a0..a7), or,
/// with `.trans` on a row-major K×N tile such as V_j, the B fragments of its two
/// 16×8 halves (b0..b3 of columns 0..7, then of columns 8..15).
FLASH_HOST_DEVICE constexpr RowCol ldmatrix_x4_address(int lane) {
  return {lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16)};
}

/// With `ldmatrix .x4` (no `.trans`) over a 16×16 tile of a row-major N×K
/// matrix such as K_j (keys × d), the row and first column `lane` addresses so
/// that registers 0..3 receive the B fragments of Bᵀ's two K×8 halves: b0..b3
/// of rows (keys) 0..7, then b0..b3 of rows 8..15 — the operand of S = Q_i K_jᵀ,
/// read from K_j as it lies, without a transpose.
FLASH_HOST_DEVICE constexpr RowCol ldmatrix_x4_address_nk(int lane) {
  return {lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2)};
}

}  // namespace common::mma
