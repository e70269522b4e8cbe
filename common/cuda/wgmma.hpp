/// \file wgmma.hpp
/// \brief The arithmetic under Hopper's warpgroup MMA (`wgmma.mma_async`,
/// sm_90a) and the tensor copies that feed it (`cp.async.bulk.tensor`, "TMA"):
/// the shared-memory matrix descriptor, the swizzle of a tile in shared memory,
/// and which thread of a warpgroup holds which element of D and of A.
///
/// As fragments.hpp does for `mma.sync`, this header issues no instruction: the
/// bit fields and index formulas a Hopper kernel depends on are written once, as
/// plain arithmetic, and tested on the CPU (tests/common/test_wgmma.cpp) against the
/// PTX ISA. A warpgroup is 4 consecutive warps, 128 threads; below, `thread` is
/// 0..127, warp = thread / 32, lane = thread % 32, group = lane / 4 and
/// quad = lane % 4 as in fragments.hpp.
///
/// - **Matrix descriptor** (PTX ISA, "Asynchronous Warpgroup Level Matrix
///   Multiply-Accumulate", "Matrix Descriptor Format"). wgmma takes an operand in
///   shared memory as a 64-bit value, not a pointer: three byte quantities
///   (start address, leading-dimension and stride-dimension byte offsets), each
///   stored as `(x & 0x3FFFF) >> 4` in 14 bits at bits 0–13, 16–29 and 32–45, a
///   3-bit base offset at bits 49–51 and the swizzle mode at bits 62–63.
///   make_descriptor() packs them; decode_descriptor() unpacks them, so a test
///   (or a debugging session) can read a descriptor back.
/// - **Swizzle** (PTX ISA, "Tensors", "Swizzling Modes", for the tensor map of
///   `cp.async.bulk.tensor`; and "Shared Memory Matrix Layout" for wgmma, whose
///   canonical layouts name the same patterns as CuTe's Swizzle<3,4,3>,
///   Swizzle<2,4,3> and Swizzle<1,4,3>). TMA stores a tile with the 16-byte
///   chunks of each 128-byte line of shared memory permuted: in the 128-byte mode
///   chunk c of line r goes to chunk c XOR (r mod 8); the 64- and 32-byte modes
///   XOR only the low 2 or 1 bits of c, with r mod 4 or r mod 2. wgmma, given the
///   same mode in the descriptor, undoes it as it reads. The reason is the 32
///   banks: one 128-byte line is one pass over all of them, so 8 rows of a
///   128-byte-wide tile read at the same column (one 8×16-byte core matrix, what
///   wgmma and ldmatrix read at once) would all hit the same 4 banks; swizzled,
///   they hit 8 different groups of 4. swizzle() is the permutation on byte
///   offsets, tile_offset() the same for (row, byte within the row).
/// - **Accumulator D** (PTX ISA, "Register Fragments and Shared Memory Matrix
///   Layouts", "Matrix Fragments for wgmma.mma_async.m64nNk16", figure "WGMMA
///   .m64nNk16 register fragment layout for accumulator matrix D"). With fp32
///   accumulators each thread holds N/2 registers d0..d(N/2-1) of the 64×N tile:
///   warp w owns rows 16w..16w+15, and within them the layout is mma.sync's
///   16×8 C fragment (fragments.hpp, c_m16n8) repeated every 8 columns:
///   row = 16·warp + group (+8 for d2, d3, d6, d7, …), col = 8·(i/4) + 2·quad + (i & 1).
///   So a row of S lives in the 4 threads of one quad, as in FlashAttention-2.
/// - **A from registers** (same section, figure "WGMMA .m64nNk16 register
///   fragment layout for matrix A"). With bf16/fp16 A in registers, each thread
///   holds a0..a7 of the 64×16 tile: warp w's rows 16w..16w+15, laid out as
///   mma.sync's 16×16 A fragment (a_m16k16). Registers 8k..8k+7 of the D
///   fragment of S are then, element for element, the A fragment of columns
///   16k..16k+15 of P̃: FlashAttention-3 feeds P̃ V from registers, as
///   FlashAttention-2 does with mma.sync.
///
/// Header-only, no CUDA types: the same functions compile for the GPU (nvcc)
/// and for the CPU tests.
#pragma once

#include <cstdint>

#include "common/cuda/fragments.hpp"  // FLASH_HOST_DEVICE, RowCol

namespace common::wgmma {

/// A position in a matrix: row, column (the type fragments.hpp uses).
using mma::RowCol;

/// The swizzle mode, numbered as in bits 62–63 of the wgmma matrix descriptor.
/// The tensor map of `cp.async.bulk.tensor` numbers the same modes differently
/// (CUtensorMapSwizzle in cuda.h: none 0, 32B 1, 64B 2, 128B 3): the host code
/// that builds the tensor map must translate, never cast.
enum class Swizzle : uint32_t {
  none = 0,  ///< no swizzle: rows of 16 bytes, core matrices stored as they are
  bytes128 = 1,  ///< 128-byte rows; the pattern repeats every 8 rows, 1024 bytes
  bytes64 = 2,  ///< 64-byte rows; the pattern repeats every 8 rows, 512 bytes
  bytes32 = 3,  ///< 32-byte rows; the pattern repeats every 8 rows, 256 bytes
};

/// The width in bytes of one row of `mode`'s swizzle atom for a K-major
/// operand: 128, 64, 32, or 16 for none (PTX ISA, "Shared Memory Matrix
/// Layout": atoms of 8×8, 8×4, 8×2 and 8×1 16-byte elements). For the
/// swizzled modes it is also the widest box row TMA accepts (cuda.h,
/// cuTensorMapEncodeTiled). An atom is 8 such rows.
FLASH_HOST_DEVICE constexpr int row_bytes(Swizzle mode) {
  return mode == Swizzle::bytes128 ? 128 : mode == Swizzle::bytes64 ? 64 : mode == Swizzle::bytes32 ? 32 : 16;
}

/// Where the byte at `offset` (counted from a base aligned to 8 rows,
/// 8·row_bytes(mode) bytes) is stored under `mode`: its 16-byte chunk, taken
/// modulo the row_bytes(mode)/16 chunks of one row, is XORed with the index of
/// its 128-byte line modulo the same number. The byte within the chunk, and
/// everything outside that row, stay. The hardware applies this to the
/// shared-memory address itself (for 128 bytes: bits 4–6 XOR bits 7–9), which
/// is why a swizzled tile must start at a multiple of the atom's size or the
/// descriptor must carry a base offset. The permutation is its own inverse.
FLASH_HOST_DEVICE constexpr int swizzle(Swizzle mode, int offset) {
  const int chunks = row_bytes(mode) / 16;  // 8, 4, 2 or 1: the chunks one row permutes
  const int chunk = (offset / 16) % chunks;
  const int line = offset / 128;  // one 128-byte line is one pass over the 32 banks
  return offset + 16 * ((chunk ^ (line % chunks)) - chunk);
}

/// Where byte `byte` (0..row_bytes(mode)-1) of row `row` of a tile stored with
/// rows of row_bytes(mode) bytes lands under `mode`, counted from the tile's
/// aligned start. For 128 bytes: row·128 + 16·(byte/16 XOR row%8) + byte%16.
FLASH_HOST_DEVICE constexpr int tile_offset(Swizzle mode, int row, int byte) {
  return swizzle(mode, row * row_bytes(mode) + byte);
}

/// `matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4` (PTX ISA, "Matrix
/// Descriptor Format"): a shared-memory byte quantity in 16-byte units, 14
/// bits. Shared memory is below 256 KiB, so 18 address bits suffice, and
/// everything wgmma reads is 16-byte aligned, so the low 4 bits are dropped.
FLASH_HOST_DEVICE constexpr uint64_t matrix_descriptor_encode(uint32_t bytes) { return (bytes & 0x3FFFFu) >> 4; }

/// The wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor
/// Format"; CUTLASS's GmmaDescriptor in cute/arch/mma_sm90_desc.hpp has the
/// same fields):
///
/// | bits  | field                                                        |
/// |-------|--------------------------------------------------------------|
/// | 0–13  | matrix_descriptor_encode(start_address)                      |
/// | 16–29 | matrix_descriptor_encode(leading_byte_offset)                |
/// | 32–45 | matrix_descriptor_encode(stride_byte_offset)                 |
/// | 49–51 | base_offset                                                  |
/// | 62–63 | swizzle                                                      |
///
/// The other bits are 0. For a K-major operand (Q_i or K_j as they lie,
/// rows along M or N, K contiguous) the stride byte offset is the distance
/// from one group of 8 rows to the next (8·row_bytes for a tile of whole
/// atoms) and the leading byte offset is unused when swizzled (the ISA says
/// "assumed 1": pass 16). For MN-major (V_j as B of P̃ V_j), see the ISA's
/// "Leading Dimension Byte Offset" and "Stride Dimension Byte Offset" tables.
/// `base_offset` is 0 when the swizzle pattern starts at a multiple of its
/// atom size (1024, 512, 256 bytes), otherwise (pattern start >> 7) & 7.
FLASH_HOST_DEVICE constexpr uint64_t make_descriptor(uint32_t start_address, uint32_t leading_byte_offset,
                                                     uint32_t stride_byte_offset, uint32_t base_offset,
                                                     Swizzle swizzle) {
  return matrix_descriptor_encode(start_address) | (matrix_descriptor_encode(leading_byte_offset) << 16) |
         (matrix_descriptor_encode(stride_byte_offset) << 32) | (uint64_t(base_offset & 0x7u) << 49) |
         (uint64_t(uint32_t(swizzle) & 0x3u) << 62);
}

/// The fields of a matrix descriptor, in bytes where the descriptor stores
/// 16-byte units.
struct DescriptorFields {
  uint32_t start_address;  ///< shared-memory byte address of the matrix (bits 0–13, ×16)
  uint32_t leading_byte_offset;  ///< leading-dimension byte offset (bits 16–29, ×16)
  uint32_t stride_byte_offset;  ///< stride-dimension byte offset (bits 32–45, ×16)
  uint32_t base_offset;  ///< matrix base offset, 0..7 (bits 49–51)
  Swizzle swizzle;  ///< swizzle mode (bits 62–63)
};

/// The fields of `descriptor`: make_descriptor() read backwards. A field
/// round-trips when it is a multiple of 16 below 2^18.
FLASH_HOST_DEVICE constexpr DescriptorFields decode_descriptor(uint64_t descriptor) {
  return {uint32_t(descriptor & 0x3FFFu) << 4, uint32_t((descriptor >> 16) & 0x3FFFu) << 4,
          uint32_t((descriptor >> 32) & 0x3FFFu) << 4, uint32_t((descriptor >> 49) & 0x7u),
          Swizzle(uint32_t(descriptor >> 62))};
}

/// The descriptor of columns k … k + 15 (k a multiple of 16) of a K-major tile of
/// `rows` rows of 16-bit elements at shared address `tile` (a multiple of 1024), laid
/// out as TMA writes it with the 128-byte swizzle (tensor_map.hpp): column blocks of
/// 64 elements, each `rows` 128-byte rows. Q_i and K_j as they lie, A and B of
/// S = Q Kᵀ. Column block k / 64 starts rows · 128 bytes further per block; within it,
/// 16 columns are 32 bytes (the hardware applies the swizzle to the address it forms);
/// groups of 8 rows are 1024 bytes apart (stride byte offset); the leading byte offset
/// is unused by a swizzled K-major operand (16).
FLASH_HOST_DEVICE constexpr uint64_t k_major_sw128(uint32_t tile, int rows, int k) {
  return make_descriptor(tile + uint32_t(k / 64) * uint32_t(rows) * 128u + uint32_t(k % 64) * 2u, 16, 1024, 0,
                         Swizzle::bytes128);
}

/// The descriptor of rows k … k + 15 of the same layout read MN-major: V_j as B of
/// P̃ V (K = keys, the rows; N = d, contiguous). 16 rows are 2048 bytes on; groups of
/// 8 rows are 1024 bytes apart (stride byte offset); the next 64 columns of N are a
/// column block, rows · 128 bytes, further (leading byte offset). CuTe writes this
/// canonical layout Swizzle<3,4,3> o ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)).
FLASH_HOST_DEVICE constexpr uint64_t mn_major_sw128(uint32_t tile, int rows, int k) {
  return make_descriptor(tile + uint32_t(k) * 128u, uint32_t(rows) * 128u, 1024, 0, Swizzle::bytes128);
}

/// Register `i` (0..N/2-1) of `thread`'s (0..127) fp32 accumulator of
/// `wgmma.mma_async.m64nNk16`: its place in the 64×N D tile.
FLASH_HOST_DEVICE constexpr RowCol d_m64nN(int thread, int i) {
  return {16 * (thread / 32) + (thread % 32) / 4 + 8 * ((i / 2) % 2), 8 * (i / 4) + 2 * (thread % 4) + i % 2};
}

/// Element `i` (0..7, two per 32-bit register) of `thread`'s (0..127) bf16/fp16
/// A fragment of `wgmma.mma_async.m64nNk16` with A in registers: its place in
/// the 64×16 A tile.
FLASH_HOST_DEVICE constexpr RowCol a_m64k16(int thread, int i) {
  return {16 * (thread / 32) + (thread % 32) / 4 + 8 * ((i / 2) % 2), 2 * (thread % 4) + i % 2 + 8 * (i / 4)};
}

}  // namespace common::wgmma
