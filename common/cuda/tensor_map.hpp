/// \file tensor_map.hpp
/// \brief The arithmetic of the Hopper steps' tensor maps, without CUDA types, so that
/// the CPU tests can check it.
///
/// Q, K and V lie in global memory as (B·H, N, d) arrays of 16-bit elements. A TMA
/// tensor map describes one of them as a 3-D tensor, innermost dimension first:
/// (d, N, B·H), with byte strides d·2 between rows and N·d·2 between heads. Its box, the
/// tile one copy moves, is (64, rows, 1): 64 elements are one 128-byte line, the widest
/// box row the 128-byte swizzle allows, so a tile of d = 128 is two boxes side by side,
/// stored one after the other (two "column blocks" of 64). A box that reaches past N
/// stops at its head: the rows beyond are outside the tensor and arrive as zeros,
/// never as the next head's rows, which a 2-D view of (B·H·N, d) would give.
#pragma once

#include <cstdint>

#include "common/cuda/fragments.hpp"  // FLASH_HOST_DEVICE
#include "common/cuda/wgmma.hpp"  // the swizzle: tile_offset

namespace common::tma {

/// Elements of one box row: 128 bytes of 16-bit elements.
inline constexpr int kBoxCols = 64;

/// A tensor map's sizes, as cuTensorMapEncodeTiled takes them (innermost first).
struct TensorMapLayout {
  uint64_t dims[3];  ///< elements: d, N, B·H
  uint64_t strides[2];  ///< bytes from one index of dimensions 1 and 2 to the next
  uint32_t box[3];  ///< elements a copy moves: 64, rows, 1
};

/// The layout of a (batch_heads, rows, d) array of 16-bit elements, copied in boxes of
/// `box_rows` rows. Requires d a multiple of 8 (16-byte rows) and 1 ≤ box_rows ≤ 256 (TMA's
/// limit); a tile ⌈d/64⌉ boxes wide gets zeros in its columns past d.
FLASH_HOST_DEVICE constexpr TensorMapLayout tensor_map_layout(int64_t batch_heads, int64_t rows, int64_t d,
                                                              int box_rows) {
  return {{uint64_t(d), uint64_t(rows), uint64_t(batch_heads)},
          {uint64_t(d) * 2, uint64_t(rows) * uint64_t(d) * 2},
          {uint32_t(kBoxCols), uint32_t(box_rows), 1u}};
}

/// Elements of one box row of an fp32 tensor: 128 bytes, the 128-byte swizzle's row.
inline constexpr int kAccumulatorBoxCols = 32;

/// The layout of a (batch_heads, rows, d) array of fp32 elements (a gradient's accumulator),
/// in boxes of (32, box_rows, 1): a tile d wide is ⌈d/32⌉ boxes of 128-byte rows, one after
/// the other. Requires d a multiple of 4 (16-byte rows).
FLASH_HOST_DEVICE constexpr TensorMapLayout accumulator_map_layout(int64_t batch_heads, int64_t rows, int64_t d,
                                                                   int box_rows) {
  return {{uint64_t(d), uint64_t(rows), uint64_t(batch_heads)},
          {uint64_t(d) * 4, uint64_t(rows) * uint64_t(d) * 4},
          {uint32_t(kAccumulatorBoxCols), uint32_t(box_rows), 1u}};
}

/// Bytes one tile of `rows` × d lands as: what its barrier expects, out-of-bounds rows included.
FLASH_HOST_DEVICE constexpr uint32_t tile_bytes(int rows, int d) { return uint32_t(rows) * uint32_t(d) * 2u; }

/// The offset in elements of column block c (64 columns) of a tile of `rows` rows.
FLASH_HOST_DEVICE constexpr int column_block(int c, int rows) { return c * rows * kBoxCols; }

/// The byte offset of a lane's 16 bytes at (row, col) of a 128-byte-swizzled tile, for
/// row < 16 and col 0 or 8: row · 128 + 16 · ((col / 8) XOR (row mod 8)), wgmma.hpp's
/// tile_offset of the element's byte. Computed once a lane, for ldmatrix.
FLASH_HOST_DEVICE constexpr uint32_t lane_offset(int row, int col) {
  return uint32_t(wgmma::tile_offset(wgmma::Swizzle::bytes128, row, 2 * col));
}

/// The byte offset, in a tile of `rows` rows as TMA's 128-byte swizzle lays it out, of
/// a lane's 16 bytes at rows r0 + …, columns k + …, given its lane_offset at r0 = k = 0.
/// With r0 a multiple of 8 and k of 16 the swizzle is the lane's own: r0 adds whole
/// 128-byte rows, k within a row flips address bits 5–6 (an XOR, not an add), and k / 64
/// is the column block. One XOR an ldmatrix, and no register per (r0, k).
FLASH_HOST_DEVICE constexpr uint32_t swizzled_offset(uint32_t lane, int rows, int r0, int k) {
  return uint32_t(column_block(k / 64, rows)) * 2u + uint32_t(r0) * 128u + (lane ^ uint32_t(k % 64 * 2));
}

}  // namespace common::tma
