/// \file test_wgmma.cpp
/// \brief Tests of common/cuda/wgmma.hpp on the CPU: the wgmma matrix
/// descriptor's bit fields, the TMA/wgmma swizzle, and the D and A register
/// fragments of `wgmma.mma_async.m64nNk16`, each against the PTX ISA's text and
/// figures and against CUTLASS's (CuTe's) definitions of the same things; and the
/// layout of the Hopper steps' TMA tensor maps (common/cuda/tensor_map.hpp).
#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "common/cuda/fragments.hpp"
#include "common/cuda/tensor_map.hpp"
#include "common/cuda/wgmma.hpp"

using common::wgmma::RowCol;

namespace {

bool same(RowCol a, RowCol b) { return a.row == b.row && a.col == b.col; }

/// The index a CuTe layout of three modes maps `x` to: `x` is split into a
/// coordinate with the first mode fastest (CuTe's colexicographic order), and
/// the coordinate is dotted with the strides.
int cute_index(int x, const int (&shape)[3], const int (&stride)[3]) {
  int index = 0;
  for (int m = 0; m < 3; ++m) {
    index += x % shape[m] * stride[m];
    x /= shape[m];
  }
  return index;
}

/// The 16-byte bank group an aligned 16-byte read at `offset` falls in: the 32
/// four-byte banks repeat every 128 bytes, and such a read covers 4 of them.
int bank_group(int offset) { return offset / 16 % 8; }

}  // namespace

TEST_CASE("wgmma descriptor: each field sits at the bits the PTX ISA gives it, and no other bit is set") {
  using namespace common::wgmma;
  // PTX ISA, "Matrix Descriptor Format": start address 13–0, leading-dimension
  // byte offset 29–16, stride-dimension byte offset 45–32 (each (x & 0x3FFFF) >> 4),
  // base offset 51–49, swizzle mode 63–62. Each field at its largest value, alone:
  const uint64_t start = make_descriptor(0x3FFF0, 0, 0, 0, Swizzle::none);
  const uint64_t leading = make_descriptor(0, 0x3FFF0, 0, 0, Swizzle::none);
  const uint64_t stride = make_descriptor(0, 0, 0x3FFF0, 0, Swizzle::none);
  const uint64_t base = make_descriptor(0, 0, 0, 7, Swizzle::none);
  const uint64_t mode = make_descriptor(0, 0, 0, 0, Swizzle::bytes32);  // 3, both bits
  CHECK(start == 0x0000000000003FFFull);
  CHECK(leading == 0x000000003FFF0000ull);
  CHECK(stride == 0x00003FFF00000000ull);
  CHECK(base == 0x000E000000000000ull);
  CHECK(mode == 0xC000000000000000ull);
  // All of them at once fill exactly those bits: bits 14–15, 30–31, 46–48 and 52–61 stay 0.
  CHECK(make_descriptor(0x3FFF0, 0x3FFF0, 0x3FFF0, 7, Swizzle::bytes32) == 0xC00E3FFF3FFF3FFFull);
  // The swizzle codes of the ISA's list: 0 none, 1 128-byte, 2 64-byte, 3 32-byte.
  CHECK((make_descriptor(0, 0, 0, 0, Swizzle::bytes128) >> 62) == 1u);
  CHECK((make_descriptor(0, 0, 0, 0, Swizzle::bytes64) >> 62) == 2u);
  // matrix-descriptor-encode keeps address bits 4–17: the low 4 and anything above are dropped.
  CHECK(matrix_descriptor_encode(0x40000 + 0x10 + 0x7) == 1u);
}

TEST_CASE("wgmma descriptor: hand-computed descriptors, and decode reads back what make_descriptor wrote") {
  using namespace common::wgmma;
  // A K-major bf16 tile of 64 rows × 64 columns (128-byte rows) at shared address
  // 0x400, 128-byte swizzle: start 0x400 >> 4 = 0x40; leading byte offset unused
  // ("assumed 1", so 16 bytes); stride byte offset 8 rows × 128 bytes = 1024 >> 4
  // = 0x40 at bit 32; mode 1 at bit 62. Sum: 0x4000'0000'0000'0000 + 0x40'0000'0000
  // + 0x1'0000 + 0x40.
  CHECK(make_descriptor(0x400, 16, 1024, 0, Swizzle::bytes128) == 0x4000004000010040ull);
  // The ISA's own examples under "Canonical Layouts": MN-major, 64-byte swizzle,
  // bf16: LBO = 256·2 = 512 bytes, encoded 32; SBO = 512·2 = 1024 bytes, encoded
  // 64; mode 2 at bit 62 = 0x8000'0000'0000'0000. K-major, no swizzle, tf32:
  // LBO = 64·4 = 256 bytes, encoded 16; SBO = 32·4 = 128 bytes, encoded 8 (and a
  // start address 0x100, encoded 0x10).
  CHECK(make_descriptor(0, 512, 1024, 0, Swizzle::bytes64) == 0x8000004000200000ull);
  CHECK(make_descriptor(0x100, 256, 128, 0, Swizzle::none) == 0x0000000800100010ull);
  // A 128-byte-swizzled tile whose pattern starts at 0x480, 128 bytes past a
  // 1024-byte boundary: base offset = (0x480 >> 7) & 7 = 1, at bit 49
  // (0x2'0000'0000'0000); start 0x480 >> 4 = 0x48.
  CHECK(make_descriptor(0x480, 16, 1024, 1, Swizzle::bytes128) == 0x4002004000010048ull);

  const DescriptorFields f = decode_descriptor(0x4002004000010048ull);
  CHECK(f.start_address == 0x480);
  CHECK(f.leading_byte_offset == 16);
  CHECK(f.stride_byte_offset == 1024);
  CHECK(f.base_offset == 1);
  CHECK(f.swizzle == Swizzle::bytes128);

  // Round trips: fields (multiples of 16 below 2^18) → descriptor → the same fields.
  for (uint32_t address = 0; address < 0x40000; address += 16 * 997) {
    for (const uint32_t offset : {16u, 1024u, 0x2A50u, 0x3FFF0u}) {
      for (uint32_t b = 0; b < 8; ++b) {
        for (const Swizzle s : {Swizzle::none, Swizzle::bytes128, Swizzle::bytes64, Swizzle::bytes32}) {
          const DescriptorFields d = decode_descriptor(make_descriptor(address, offset, 0x3FFF0 - offset, b, s));
          REQUIRE(d.start_address == address);
          REQUIRE(d.leading_byte_offset == offset);
          REQUIRE(d.stride_byte_offset == 0x3FFF0 - offset);
          REQUIRE(d.base_offset == b);
          REQUIRE(d.swizzle == s);
        }
      }
    }
  }
  // And descriptors (with the unused bits 0) → fields → the same descriptor.
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int n = 0; n < 1000; ++n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;  // a 64-bit LCG: varied bits, same every run
    const uint64_t descriptor = x & 0xC00E3FFF3FFF3FFFull;
    const DescriptorFields d = decode_descriptor(descriptor);
    REQUIRE(make_descriptor(d.start_address, d.leading_byte_offset, d.stride_byte_offset, d.base_offset, d.swizzle) ==
            descriptor);
  }
}

TEST_CASE("wgmma swizzle: the PTX ISA's tables for TMA's swizzle modes, and CuTe's Swizzle<B,4,3>") {
  using namespace common::wgmma;
  // PTX ISA, "Tensors", "Swizzling Modes": one table row per 128-byte line of
  // shared memory, one cell per 16-byte chunk, the cell telling which chunk of
  // the source row is stored there; the pattern repeats after 8, 4, 2 lines.
  const int table128[8][8] = {{0, 1, 2, 3, 4, 5, 6, 7}, {1, 0, 3, 2, 5, 4, 7, 6}, {2, 3, 0, 1, 6, 7, 4, 5},
                              {3, 2, 1, 0, 7, 6, 5, 4}, {4, 5, 6, 7, 0, 1, 2, 3}, {5, 4, 7, 6, 1, 0, 3, 2},
                              {6, 7, 4, 5, 2, 3, 0, 1}, {7, 6, 5, 4, 3, 2, 1, 0}};  // 128-byte mode, 16-byte atomicity
  const int table64[4][8] = {
      {0, 1, 2, 3, 4, 5, 6, 7}, {1, 0, 3, 2, 5, 4, 7, 6}, {2, 3, 0, 1, 6, 7, 4, 5}, {3, 2, 1, 0, 7, 6, 5, 4}};
  const int table32[2][8] = {{0, 1, 2, 3, 4, 5, 6, 7}, {1, 0, 3, 2, 5, 4, 7, 6}};
  for (int line = 0; line < 16; ++line) {  // two repeats and more
    for (int cell = 0; cell < 8; ++cell) {
      for (const int byte : {0, 5, 15}) {
        const int stored = 128 * line + 16 * cell + byte;
        CHECK(swizzle(Swizzle::bytes128, 128 * line + 16 * table128[line % 8][cell] + byte) == stored);
        CHECK(swizzle(Swizzle::bytes64, 128 * line + 16 * table64[line % 4][cell] + byte) == stored);
        CHECK(swizzle(Swizzle::bytes32, 128 * line + 16 * table32[line % 2][cell] + byte) == stored);
      }
    }
  }
  // CuTe's Swizzle<B,M,S> (cute/swizzle.hpp) maps x to x ^ ((x & yyy) >> S), yyy
  // being B bits from bit M + S. The ISA's canonical layouts name Swizzle<3,4,3>,
  // <2,4,3>, <1,4,3> for the 128-, 64- and 32-byte modes, <0,4,3> for none;
  // CUTLASS applies them to shared-memory byte addresses (cute/pointer_swizzle.hpp).
  const int bits[] = {0, 3, 2, 1};  // indexed by the descriptor's code: none, 128B, 64B, 32B
  for (const Swizzle s : {Swizzle::none, Swizzle::bytes128, Swizzle::bytes64, Swizzle::bytes32}) {
    const int yyy = ((1 << bits[int(s)]) - 1) << (4 + 3);
    for (int x = 0; x < 4096; ++x) REQUIRE(swizzle(s, x) == (x ^ ((x & yyy) >> 3)));
  }
}

TEST_CASE(
    "wgmma swizzle: a permutation of the 16-byte chunks within each row, its own inverse, repeating every 8 rows") {
  using namespace common::wgmma;
  for (const Swizzle s : {Swizzle::none, Swizzle::bytes128, Swizzle::bytes64, Swizzle::bytes32}) {
    const int w = row_bytes(s);
    for (int row = 0; row < 24; ++row) {
      std::set<int> chunks;
      for (int byte = 0; byte < w; ++byte) {
        const int at = tile_offset(s, row, byte);
        REQUIRE(at / w == row);  // stays in its row
        REQUIRE(at % 16 == byte % 16);  // and in its place within a chunk
        REQUIRE(swizzle(s, at) == row * w + byte);  // applying it twice is the identity
        REQUIRE(tile_offset(s, row + 8, byte) == at + 8 * w);  // the pattern is 8 rows long
        chunks.insert(at % w / 16);
      }
      REQUIRE(int(chunks.size()) == w / 16);  // no two chunks of a row land on the same place
    }
  }
  // The 128-byte mode on a tile of 128-byte rows: chunk byte/16 of row r goes to
  // chunk (byte/16) XOR (r % 8), for every row of a 64-row tile.
  for (int row = 0; row < 64; ++row) {
    for (int byte = 0; byte < 128; ++byte) {
      REQUIRE(tile_offset(Swizzle::bytes128, row, byte) == 128 * row + 16 * ((byte / 16) ^ (row % 8)) + byte % 16);
    }
  }
  // Worked by hand: 128 B, row 3, byte 16 (chunk 1): 1 ^ 3 = 2, so 3·128 + 32 = 416.
  // 128 B, row 9, byte 117 (chunk 7, byte 5): 7 ^ (9 % 8) = 6, so 9·128 + 96 + 5 = 1253.
  // 64 B (64-byte rows, two per line), row 5, byte 50 (chunk 3, byte 2): line 5·64/128 = 2,
  // 3 ^ 2 = 1, so 5·64 + 16 + 2 = 338. 32 B, row 6, byte 3 (chunk 0): line 6·32/128 = 1,
  // 0 ^ 1 = 1, so 6·32 + 16 + 3 = 211.
  CHECK(tile_offset(Swizzle::bytes128, 3, 16) == 416);
  CHECK(tile_offset(Swizzle::bytes128, 9, 117) == 1253);
  CHECK(tile_offset(Swizzle::bytes64, 5, 50) == 338);
  CHECK(tile_offset(Swizzle::bytes32, 6, 3) == 211);
  CHECK(tile_offset(Swizzle::none, 6, 3) == 99);
  // An atom is 8 rows: 1024, 512 and 256 bytes, the alignments the ISA asks of the pattern's start.
  CHECK(8 * row_bytes(Swizzle::bytes128) == 1024);
  CHECK(8 * row_bytes(Swizzle::bytes64) == 512);
  CHECK(8 * row_bytes(Swizzle::bytes32) == 256);
}

TEST_CASE("wgmma swizzle: 8 rows read at one column hit 8 different bank groups, unswizzled rows do not") {
  using namespace common::wgmma;
  // One core matrix (what wgmma and ldmatrix read at once): 8 rows × 16 bytes at
  // the same logical column. Stored plainly with rows of w bytes, the 8 reads
  // share 128/w bank groups, a w/16-way conflict (8-way for 128-byte rows).
  for (const Swizzle s : {Swizzle::bytes128, Swizzle::bytes64, Swizzle::bytes32}) {
    const int w = row_bytes(s);
    for (int first = 0; first < 64; first += 8) {
      for (int chunk = 0; chunk < w / 16; ++chunk) {
        std::set<int> plain, swizzled;
        for (int r = first; r < first + 8; ++r) {
          plain.insert(bank_group(r * w + 16 * chunk));
          swizzled.insert(bank_group(tile_offset(s, r, 16 * chunk)));
        }
        REQUIRE(int(plain.size()) == 128 / w);
        REQUIRE(swizzled.size() == 8);
      }
    }
  }
  // In the 128-byte mode any 8 consecutive rows do, not only an aligned 8.
  for (int first = 0; first < 64; ++first) {
    for (int chunk = 0; chunk < 8; ++chunk) {
      std::set<int> groups;
      for (int r = first; r < first + 8; ++r) groups.insert(bank_group(tile_offset(Swizzle::bytes128, r, 16 * chunk)));
      REQUIRE(groups.size() == 8);
    }
  }
}

TEST_CASE(
    "wgmma D fragment (m64nNk16, fp32): the PTX ISA's figure and CUTLASS's CLayout_64xN, each element held once") {
  using namespace common::wgmma;
  // PTX ISA, "Matrix Fragments for wgmma.mma_async.m64nNk16", figure "WGMMA
  // .m64nNk16 register fragment layout for accumulator matrix D": T0 holds d0, d1
  // at row 0, columns 0, 1, d2, d3 at row 8, and d4..d7 the same 8 columns to the
  // right; T5 (group 1, quad 1) starts at row 1, column 2; T32, the first thread of
  // warp 1, at row 16; T127 ends the tile: d0..d3 at rows 55 and 63, columns 6, 7,
  // and for N = 256 the last four, dX..dW = d124..d127, at columns 254, 255. The
  // figure is an image; every entry it draws is also checked below, through CUTLASS.
  const RowCol t0[8] = {{0, 0}, {0, 1}, {8, 0}, {8, 1}, {0, 8}, {0, 9}, {8, 8}, {8, 9}};
  const RowCol t5[4] = {{1, 2}, {1, 3}, {9, 2}, {9, 3}};
  const RowCol t32[4] = {{16, 0}, {16, 1}, {24, 0}, {24, 1}};
  const RowCol t127[4] = {{55, 6}, {55, 7}, {63, 6}, {63, 7}};
  const RowCol t127_last[4] = {{55, 254}, {55, 255}, {63, 254}, {63, 255}};
  for (int i = 0; i < 8; ++i) CHECK(same(d_m64nN(0, i), t0[i]));
  for (int i = 0; i < 4; ++i) {
    CHECK(same(d_m64nN(5, i), t5[i]));
    CHECK(same(d_m64nN(32, i), t32[i]));
    CHECK(same(d_m64nN(127, i), t127[i]));
    CHECK(same(d_m64nN(127, 124 + i), t127_last[i]));
  }
  // CUTLASS, cute/atom/mma_traits_sm90_gmma.hpp: CLayout_64xN maps (thread,
  // register) to m + 64·n in the 64×N tile with threads (4,8,4):(128,1,16) and
  // registers (2,2,N/8):(64,8,512). N runs over every size the ISA allows, 8..256.
  for (int n = 8; n <= 256; n += 8) {
    const int threads[3] = {4, 8, 4}, thread_strides[3] = {128, 1, 16};
    const int registers[3] = {2, 2, n / 8}, register_strides[3] = {64, 8, 512};
    std::vector<int> held(64 * n, 0);
    for (int t = 0; t < 128; ++t) {
      for (int i = 0; i < n / 2; ++i) {
        CAPTURE(n);
        CAPTURE(t);
        CAPTURE(i);
        const RowCol d = d_m64nN(t, i);
        const int cute = cute_index(t, threads, thread_strides) + cute_index(i, registers, register_strides);
        REQUIRE(same(d, RowCol{cute % 64, cute / 64}));
        REQUIRE((d.row >= 0 && d.row < 64 && d.col >= 0 && d.col < n));
        ++held[d.row * n + d.col];
      }
    }
    for (const int h : held) REQUIRE(h == 1);
  }
}

TEST_CASE("wgmma D fragment: warp w holds rows 16w..16w+15 as mma.sync's C tiles, and each row lives in one quad") {
  using namespace common::wgmma;
  const int n = 128;
  for (int t = 0; t < 128; ++t) {
    for (int i = 0; i < n / 2; ++i) {
      // Every 8 columns, the warp's 16 rows are one 16×8 C fragment of mma.sync.
      const RowCol c = common::mma::c_m16n8(t % 32, i % 4);
      REQUIRE(same(d_m64nN(t, i), RowCol{16 * (t / 32) + c.row, 8 * (i / 4) + c.col}));
    }
  }
  // A row maximum or sum over S's row needs only the 4 threads of one quad (lane
  // bits 0 and 1, two __shfl_xor_sync), each holding N/4 of the row's N elements.
  std::vector<std::set<int>> holders(64);
  std::vector<int> count(64 * 128, 0);
  for (int t = 0; t < 128; ++t) {
    for (int i = 0; i < n / 2; ++i) {
      const RowCol d = d_m64nN(t, i);
      holders[d.row].insert(t);
      ++count[d.row * 128 + t];
    }
  }
  for (int row = 0; row < 64; ++row) {
    CAPTURE(row);
    REQUIRE(holders[row].size() == 4);
    const int first = *holders[row].begin();
    for (const int t : holders[row]) {
      REQUIRE(t / 4 == first / 4);  // same warp, same group: lanes that differ in bits 0 and 1 only
      REQUIRE(count[row * 128 + t] == n / 4);
    }
  }
}

TEST_CASE(
    "wgmma A fragment (m64nNk16, 16-bit, from registers): the PTX ISA's figure, CUTLASS's ALayout_64x16, and S's D is "
    "P's A") {
  using namespace common::wgmma;
  // PTX ISA, same section, figure "WGMMA .m64nNk16 register fragment layout for
  // matrix A": T0 holds a0, a1 at row 0, columns 0, 1; a2, a3 at row 8; a4..a7 the
  // same 8 columns further; T127 holds rows 55 and 63, columns 6, 7, 14, 15.
  const RowCol t0[8] = {{0, 0}, {0, 1}, {8, 0}, {8, 1}, {0, 8}, {0, 9}, {8, 8}, {8, 9}};
  const RowCol t127[8] = {{55, 6}, {55, 7}, {63, 6}, {63, 7}, {55, 14}, {55, 15}, {63, 14}, {63, 15}};
  for (int i = 0; i < 8; ++i) {
    CHECK(same(a_m64k16(0, i), t0[i]));
    CHECK(same(a_m64k16(127, i), t127[i]));
  }
  // CUTLASS, cute/atom/mma_traits_sm90_gmma.hpp: ALayout_64x16 (16-bit types) maps
  // (thread, element) to m + 64·k with threads (4,8,4):(128,1,16) and elements
  // (2,2,2):(64,8,512); each element of the 64×16 tile is held once.
  const int threads[3] = {4, 8, 4}, thread_strides[3] = {128, 1, 16};
  const int elements[3] = {2, 2, 2}, element_strides[3] = {64, 8, 512};
  std::vector<int> held(64 * 16, 0);
  for (int t = 0; t < 128; ++t) {
    for (int i = 0; i < 8; ++i) {
      CAPTURE(t);
      CAPTURE(i);
      const RowCol a = a_m64k16(t, i);
      const int cute = cute_index(t, threads, thread_strides) + cute_index(i, elements, element_strides);
      REQUIRE(same(a, RowCol{cute % 64, cute / 64}));
      // Warp w's 16 rows are mma.sync's 16×16 A fragment.
      const RowCol m = common::mma::a_m16k16(t % 32, i);
      REQUIRE(same(a, RowCol{16 * (t / 32) + m.row, m.col}));
      ++held[a.row * 16 + a.col];
    }
  }
  for (const int h : held) REQUIRE(h == 1);
  // FlashAttention-3 keeps P̃ in registers: registers 8k..8k+7 of S's D fragment
  // (fp32, rounded in pairs to bf16/fp16) are exactly the A fragment of columns
  // 16k..16k+15, so P̃ V_j can be issued with A from registers.
  for (int n = 16; n <= 256; n += 16) {
    for (int t = 0; t < 128; ++t) {
      for (int k = 0; k < n / 16; ++k) {
        for (int j = 0; j < 8; ++j) {
          const RowCol a = a_m64k16(t, j);
          REQUIRE(same(d_m64nN(t, 8 * k + j), RowCol{a.row, 16 * k + a.col}));
        }
      }
    }
  }
}

TEST_CASE("wgmma: the descriptors of TMA's 128-byte-swizzled tiles, K-major (Q_i, K_j) and MN-major (V_j)") {
  using common::wgmma::decode_descriptor;
  using common::wgmma::Swizzle;
  // A K_j of 128 rows at d = 128 at shared address 0x8000: columns 0-15, 48-63, 64-79, 112-127.
  constexpr uint32_t tile = 0x8000;
  const auto at = [&](int k) { return decode_descriptor(common::wgmma::k_major_sw128(tile, 128, k)); };
  CHECK(at(0).start_address == tile);
  CHECK(at(48).start_address == tile + 96);  // 48 columns of 2 bytes into the 128-byte row
  CHECK(at(64).start_address == tile + 128 * 128);  // the second column block: 128 rows of 128 bytes on
  CHECK(at(112).start_address == tile + 128 * 128 + 96);
  for (int k = 0; k < 128; k += 16) {
    CHECK(at(k).stride_byte_offset == 1024);  // 8 rows of 128 bytes
    CHECK(at(k).swizzle == Swizzle::bytes128);
    CHECK(at(k).base_offset == 0);  // the tile starts on a 1024-byte boundary
  }
  // V_j (128 keys, d = 128) read MN-major: 16 keys on is 16 rows on; the leading offset
  // is one column block (the next 64 of d), the stride offset 8 keys.
  const auto v = decode_descriptor(common::wgmma::mn_major_sw128(tile, 128, 32));
  CHECK(v.start_address == tile + 32 * 128);
  CHECK(v.leading_byte_offset == 128 * 128);
  CHECK(v.stride_byte_offset == 1024);
  CHECK(v.swizzle == Swizzle::bytes128);
}

TEST_CASE("tma: ldmatrix's swizzled offsets, one XOR from the lane's own, equal the swizzle itself") {
  using common::wgmma::Swizzle;
  using common::wgmma::tile_offset;
  for (int rows : {64, 128}) {
    for (int row = 0; row < 16; ++row) {
      for (int col : {0, 8}) {
        const uint32_t lane = common::tma::lane_offset(row, col);
        for (int r0 = 0; r0 + 16 <= rows; r0 += 8) {
          for (int k = 0; k < 128; k += 16) {
            const int expected = 2 * common::tma::column_block(k / 64, rows) +
                                 tile_offset(Swizzle::bytes128, r0 + row, 2 * (k % 64 + col));
            REQUIRE(common::tma::swizzled_offset(lane, rows, r0, k) == uint32_t(expected));
          }
        }
      }
    }
  }
}

TEST_CASE("tma: a tensor map's layout is (d, N, B·H) with 128-byte box rows, each head its own rows") {
  using common::tma::tensor_map_layout;
  constexpr auto k = tensor_map_layout(64, 4096, 128, 128);
  CHECK(k.dims[0] == 128);
  CHECK(k.dims[1] == 4096);
  CHECK(k.dims[2] == 64);
  CHECK(k.strides[0] == 256);  // bytes from one row to the next
  CHECK(k.strides[1] == 4096 * 256);  // bytes from one head to the next
  CHECK(k.box[0] * 2 == 128);  // one box row = one 128-byte swizzle line
  CHECK(k.box[1] == 128);
  CHECK(k.box[2] == 1);
  // TMA needs every stride a multiple of 16 bytes: true for any N at d = 64 and 128.
  for (int64_t n : {1, 7, 333, 1000}) {
    for (int64_t d : {64, 128}) {
      const auto layout = tensor_map_layout(3, n, d, 64);
      CHECK(layout.strides[0] % 16 == 0);
      CHECK(layout.strides[1] % 16 == 0);
    }
  }
  CHECK(common::tma::tile_bytes(128, 128) == 32768);  // what a barrier expects for a K_j at d = 128
  CHECK(common::tma::column_block(1, 128) == 128 * 64);  // the second 64 columns follow the first
}

TEST_CASE("tma: an fp32 accumulator's map is (d, N, B·H) in boxes of 32 columns, one 128-byte swizzle line") {
  using common::tma::accumulator_map_layout;
  constexpr auto a = accumulator_map_layout(3, 130, 96, 64);  // step 33's dQ at d = 96, B_r = 64
  CHECK(a.dims[0] == 96);
  CHECK(a.dims[1] == 130);
  CHECK(a.dims[2] == 3);
  CHECK(a.strides[0] == 96 * 4);  // bytes from one row to the next
  CHECK(a.strides[1] == 130 * 96 * 4);  // bytes from one head to the next
  CHECK(a.box[0] * 4 == 128);  // one box row = one 128-byte swizzle line
  CHECK(a.box[1] == 64);
  CHECK(a.box[2] == 1);
  // Any N and any d that is a multiple of 4 gives strides of whole 16 bytes, as TMA needs.
  for (int64_t n : {1, 7, 333}) {
    for (int64_t d : {64, 96, 128}) {
      const auto layout = accumulator_map_layout(2, n, d, 64);
      CHECK(layout.strides[0] % 16 == 0);
      CHECK(layout.strides[1] % 16 == 0);
    }
  }
}

TEST_CASE("swizzle: a store's place in a 128-byte-swizzled row is a per-thread base XOR a per-column constant") {
  // Step 33 writes dS_ijᵀ (2-byte elements) and dQ_i's term (4-byte) into rows that TMA's 128-byte
  // swizzle lays out: element bytes b of row r go to chunk (b / 16) XOR (r % 8). For a thread whose
  // rows are ≡ x (mod 8) and whose byte within a 16-byte chunk is w, the offset within the row is
  // (16·x + w) XOR 16·c for the element's chunk c: one XOR with a constant of the unrolled loop.
  using common::wgmma::Swizzle;
  using common::wgmma::tile_offset;
  for (int row = 0; row < 64; ++row) {
    for (int byte = 0; byte < 128; byte += 4) {
      const int x = row % 8, c = byte / 16, w = byte % 16;
      REQUIRE(tile_offset(Swizzle::bytes128, row, byte) == row * 128 + ((16 * x + w) ^ (16 * c)));
    }
  }
}
