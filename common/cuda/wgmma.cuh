/// \file wgmma.cuh
/// \brief Hopper's warpgroup matrix multiply-accumulate, `wgmma.mma_async` (sm_90a),
/// one thin wrapper per form the Hopper steps use, and the three instructions that
/// order it: `wgmma.fence`, `wgmma.commit_group`, `wgmma.wait_group`.
///
/// PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions":
/// the 128 threads of a warpgroup issue one wgmma together; it reads B (and A, when
/// A is in shared memory) through 64-bit matrix descriptors (common/cuda/wgmma.hpp:
/// make_descriptor, tested on the CPU) and accumulates D, 64 × N fp32, in the
/// threads' registers. The instruction is asynchronous: it returns at once, and the
/// registers it reads or writes belong to the tensor cores until the thread waits
/// (`wgmma_wait`) for the group it was committed in.
///
/// Accumulators are passed as `float d[2][N/4]` per thread: d[t][n] is row
/// 16·warp + group + 8·t and column 8·(n/2) + 2·quad + n % 2 of the 64 × N tile
/// (wgmma.hpp, d_m64nN, with register i = d[(i/2) % 2][2·(i/4) + i % 2]). That is the
/// mma.sync C layout of fragments.hpp, repeated every 8 columns: the softmax code of
/// the mma.sync steps reads it unchanged. The lists below give the registers to the
/// PTX in its own order.
///
/// Built only for `sm_90a` (`-gencode=arch=compute_90a,code=sm_90a`): wgmma exists on
/// no other target, not even plain sm_90.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

// The register lists and the PTX strings of this file are tables laid out by hand in the
// PTX ISA's order, eight registers a row; clang-format would re-pack them.
// clang-format off
/// The 32 accumulator registers of an m64n64k16 wgmma, in the order the PTX lists them.
#define FLASH_WGMMA_D64 \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][2]), "+f"(d[1][3]), \
  "+f"(d[0][4]), "+f"(d[0][5]), "+f"(d[1][4]), "+f"(d[1][5]), "+f"(d[0][6]), "+f"(d[0][7]), "+f"(d[1][6]), "+f"(d[1][7]), \
  "+f"(d[0][8]), "+f"(d[0][9]), "+f"(d[1][8]), "+f"(d[1][9]), "+f"(d[0][10]), "+f"(d[0][11]), "+f"(d[1][10]), "+f"(d[1][11]), \
  "+f"(d[0][12]), "+f"(d[0][13]), "+f"(d[1][12]), "+f"(d[1][13]), "+f"(d[0][14]), "+f"(d[0][15]), "+f"(d[1][14]), "+f"(d[1][15])

/// The placeholders of those 32 registers in the PTX string, numbered 0 to 31, in braces.
#define FLASH_WGMMA_D64_SLOTS "{" \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" "}"

/// The 16 accumulator registers of an m64n32k16 wgmma, in the order the PTX lists them.
#define FLASH_WGMMA_D32 \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][2]), "+f"(d[1][3]), \
  "+f"(d[0][4]), "+f"(d[0][5]), "+f"(d[1][4]), "+f"(d[1][5]), "+f"(d[0][6]), "+f"(d[0][7]), "+f"(d[1][6]), "+f"(d[1][7])

/// The placeholders of those 16 registers in the PTX string, numbered 0 to 15, in braces.
#define FLASH_WGMMA_D32_SLOTS "{" \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15" "}"

/// The 64 accumulator registers of an m64n128k16 wgmma, in the order the PTX lists them.
#define FLASH_WGMMA_D128 \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][2]), "+f"(d[1][3]), \
  "+f"(d[0][4]), "+f"(d[0][5]), "+f"(d[1][4]), "+f"(d[1][5]), "+f"(d[0][6]), "+f"(d[0][7]), "+f"(d[1][6]), "+f"(d[1][7]), \
  "+f"(d[0][8]), "+f"(d[0][9]), "+f"(d[1][8]), "+f"(d[1][9]), "+f"(d[0][10]), "+f"(d[0][11]), "+f"(d[1][10]), "+f"(d[1][11]), \
  "+f"(d[0][12]), "+f"(d[0][13]), "+f"(d[1][12]), "+f"(d[1][13]), "+f"(d[0][14]), "+f"(d[0][15]), "+f"(d[1][14]), "+f"(d[1][15]), \
  "+f"(d[0][16]), "+f"(d[0][17]), "+f"(d[1][16]), "+f"(d[1][17]), "+f"(d[0][18]), "+f"(d[0][19]), "+f"(d[1][18]), "+f"(d[1][19]), \
  "+f"(d[0][20]), "+f"(d[0][21]), "+f"(d[1][20]), "+f"(d[1][21]), "+f"(d[0][22]), "+f"(d[0][23]), "+f"(d[1][22]), "+f"(d[1][23]), \
  "+f"(d[0][24]), "+f"(d[0][25]), "+f"(d[1][24]), "+f"(d[1][25]), "+f"(d[0][26]), "+f"(d[0][27]), "+f"(d[1][26]), "+f"(d[1][27]), \
  "+f"(d[0][28]), "+f"(d[0][29]), "+f"(d[1][28]), "+f"(d[1][29]), "+f"(d[0][30]), "+f"(d[0][31]), "+f"(d[1][30]), "+f"(d[1][31])

/// The placeholders of those 64 registers in the PTX string, numbered 0 to 63, in braces.
#define FLASH_WGMMA_D128_SLOTS "{" \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" "}"
// clang-format on

/// The 128 accumulator registers of an m64n256k16 wgmma, in the order the PTX lists them.
#define FLASH_WGMMA_D256                                                                                              \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][2]),            \
      "+f"(d[1][3]), "+f"(d[0][4]), "+f"(d[0][5]), "+f"(d[1][4]), "+f"(d[1][5]), "+f"(d[0][6]), "+f"(d[0][7]),        \
      "+f"(d[1][6]), "+f"(d[1][7]), "+f"(d[0][8]), "+f"(d[0][9]), "+f"(d[1][8]), "+f"(d[1][9]), "+f"(d[0][10]),       \
      "+f"(d[0][11]), "+f"(d[1][10]), "+f"(d[1][11]), "+f"(d[0][12]), "+f"(d[0][13]), "+f"(d[1][12]), "+f"(d[1][13]), \
      "+f"(d[0][14]), "+f"(d[0][15]), "+f"(d[1][14]), "+f"(d[1][15]), "+f"(d[0][16]), "+f"(d[0][17]), "+f"(d[1][16]), \
      "+f"(d[1][17]), "+f"(d[0][18]), "+f"(d[0][19]), "+f"(d[1][18]), "+f"(d[1][19]), "+f"(d[0][20]), "+f"(d[0][21]), \
      "+f"(d[1][20]), "+f"(d[1][21]), "+f"(d[0][22]), "+f"(d[0][23]), "+f"(d[1][22]), "+f"(d[1][23]), "+f"(d[0][24]), \
      "+f"(d[0][25]), "+f"(d[1][24]), "+f"(d[1][25]), "+f"(d[0][26]), "+f"(d[0][27]), "+f"(d[1][26]), "+f"(d[1][27]), \
      "+f"(d[0][28]), "+f"(d[0][29]), "+f"(d[1][28]), "+f"(d[1][29]), "+f"(d[0][30]), "+f"(d[0][31]), "+f"(d[1][30]), \
      "+f"(d[1][31]), "+f"(d[0][32]), "+f"(d[0][33]), "+f"(d[1][32]), "+f"(d[1][33]), "+f"(d[0][34]), "+f"(d[0][35]), \
      "+f"(d[1][34]), "+f"(d[1][35]), "+f"(d[0][36]), "+f"(d[0][37]), "+f"(d[1][36]), "+f"(d[1][37]), "+f"(d[0][38]), \
      "+f"(d[0][39]), "+f"(d[1][38]), "+f"(d[1][39]), "+f"(d[0][40]), "+f"(d[0][41]), "+f"(d[1][40]), "+f"(d[1][41]), \
      "+f"(d[0][42]), "+f"(d[0][43]), "+f"(d[1][42]), "+f"(d[1][43]), "+f"(d[0][44]), "+f"(d[0][45]), "+f"(d[1][44]), \
      "+f"(d[1][45]), "+f"(d[0][46]), "+f"(d[0][47]), "+f"(d[1][46]), "+f"(d[1][47]), "+f"(d[0][48]), "+f"(d[0][49]), \
      "+f"(d[1][48]), "+f"(d[1][49]), "+f"(d[0][50]), "+f"(d[0][51]), "+f"(d[1][50]), "+f"(d[1][51]), "+f"(d[0][52]), \
      "+f"(d[0][53]), "+f"(d[1][52]), "+f"(d[1][53]), "+f"(d[0][54]), "+f"(d[0][55]), "+f"(d[1][54]), "+f"(d[1][55]), \
      "+f"(d[0][56]), "+f"(d[0][57]), "+f"(d[1][56]), "+f"(d[1][57]), "+f"(d[0][58]), "+f"(d[0][59]), "+f"(d[1][58]), \
      "+f"(d[1][59]), "+f"(d[0][60]), "+f"(d[0][61]), "+f"(d[1][60]), "+f"(d[1][61]), "+f"(d[0][62]), "+f"(d[0][63]), \
      "+f"(d[1][62]), "+f"(d[1][63])

/// The placeholders of those 128 registers in the PTX string, numbered 0 to 127, in braces.
#define FLASH_WGMMA_D256_SLOTS                                                                     \
  "{"                                                                                              \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                         \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "               \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "               \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "               \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "               \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "               \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "   \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
  "}"

namespace common::cuda {

/// `wgmma.fence.sync.aligned`: orders this thread's earlier register writes (an
/// accumulator rescaled, an A fragment packed) before the wgmmas issued after it.
__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

/// `wgmma.commit_group.sync.aligned`: closes the group of wgmmas issued so far.
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

/// `wgmma.wait_group.sync.aligned N`: waits until at most N committed groups are
/// still running; their registers are then the thread's again.
template <int kPending>
__device__ inline void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

/// Keeps the compiler from moving reads or writes of `d` across this point: put
/// around the asynchronous region (the registers change under it, unseen).
template <int N>
__device__ inline void fence_operand(float (&d)[2][N]) {
#pragma unroll
  for (int t = 0; t < 2; ++t) {
#pragma unroll
    for (int n = 0; n < N; ++n) asm volatile("" : "+f"(d[t][n])::"memory");
  }
}

// clang-format off
/// The asm of one m64nNk16 wgmma with A and B from shared memory, both K-major
/// (imm-trans-a = imm-trans-b = 0); `accumulate` 0 overwrites D (scale-d = 0), 1 adds to it.
/// A, B, S: the operand numbers of the two descriptors and of `accumulate`.
#define FLASH_WGMMA_SS(N, TYPE, A, B, S)                                                                    \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" S ", 0;\n"                                              \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " " FLASH_WGMMA_D##N##_SLOTS \
               ", %" A ", %" B ", p, 1, 1, 0, 0;\n}\n"                                                      \
               : FLASH_WGMMA_D##N                                                                           \
               : "l"(a), "l"(b), "r"(accumulate))

/// The asm of one m64nNk16 wgmma with A and B from shared memory, both MN-major
/// (imm-trans-a = imm-trans-b = 1: A's rows are K with M contiguous, B's rows are K with N
/// contiguous).
#define FLASH_WGMMA_SS_MN(N, TYPE, A, B, S)                                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" S ", 0;\n"                                              \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " " FLASH_WGMMA_D##N##_SLOTS \
               ", %" A ", %" B ", p, 1, 1, 1, 1;\n}\n"                                                      \
               : FLASH_WGMMA_D##N                                                                           \
               : "l"(a), "l"(b), "r"(accumulate))

/// The asm of one m64nNk16 wgmma with A from registers (4 × 32 bits: the 64 × 16
/// fragment, wgmma.hpp a_m64k16) and B from shared memory MN-major (imm-trans-b = 1:
/// B's rows are K, N contiguous). A0, B, S: the operand numbers of A's registers, B's
/// descriptor and `accumulate`.
#define FLASH_WGMMA_RS(N, TYPE, A0, B, S)                                                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" S ", 0;\n"                                              \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " " FLASH_WGMMA_D##N##_SLOTS \
               ", {%" A0 "}, %" B ", p, 1, 1, 1;\n}\n"                                                      \
               : FLASH_WGMMA_D##N                                                                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))
// clang-format on

/// The rows of one wgmma's A and D (m64nNk16): a warpgroup's share of a tile of Q_i.
constexpr int kWarpgroupRows = 64;

/// wgmma's scale-d operand: 1 adds the product to D (D = A·B + D), 0 overwrites D with it.
constexpr int kAccumulate = 1;

/// D (64 × N) = A·B (+ D when `accumulate`): `wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T`
/// with A (64 × 16) and B (N × 16, i.e. Bᵀ stored K-major) described in shared memory.
/// T: __nv_bfloat16 or __half; N: 32, 64 or 128.
template <class T, int N>
__device__ inline void wgmma_ss(float (&d)[2][N / 4], uint64_t a, uint64_t b, int accumulate) {
  static_assert(N == 32 || N == 64 || N == 128, "the Hopper steps use N = 32 (a backward pass), 64 and 128");
  if constexpr (N == 32 && std::is_same_v<T, __half>) FLASH_WGMMA_SS(32, "f16", "16", "17", "18");
  else if constexpr (N == 32) FLASH_WGMMA_SS(32, "bf16", "16", "17", "18");
  else if constexpr (N == 64 && std::is_same_v<T, __half>) FLASH_WGMMA_SS(64, "f16", "32", "33", "34");
  else if constexpr (N == 64) FLASH_WGMMA_SS(64, "bf16", "32", "33", "34");
  else if constexpr (std::is_same_v<T, __half>) FLASH_WGMMA_SS(128, "f16", "64", "65", "66");
  else FLASH_WGMMA_SS(128, "bf16", "64", "65", "66");
}

/// D (64 × N) = A·B (+ D when `accumulate`) with A (64 × 16) and B (16 × N) both in shared
/// memory MN-major: the rows of each are K, and M (for A) or N (for B) is contiguous, as
/// dS_ijᵀ and K_j lie for dQ_i = dS_ij K_j. T: __nv_bfloat16 or __half; N: 32 or 64.
template <class T, int N>
__device__ inline void wgmma_ss_mn(float (&d)[2][N / 4], uint64_t a, uint64_t b, int accumulate) {
  static_assert(N == 32 || N == 64, "the backward's dQ_i uses N = 32 and 64 (half of d a warpgroup)");
  if constexpr (N == 32 && std::is_same_v<T, __half>) FLASH_WGMMA_SS_MN(32, "f16", "16", "17", "18");
  else if constexpr (N == 32) FLASH_WGMMA_SS_MN(32, "bf16", "16", "17", "18");
  else if constexpr (std::is_same_v<T, __half>) FLASH_WGMMA_SS_MN(64, "f16", "32", "33", "34");
  else FLASH_WGMMA_SS_MN(64, "bf16", "32", "33", "34");
}

/// D (64 × N) += A·B with A (64 × 16) in registers, `a` as wgmma.hpp's a_m64k16 lays
/// it out (two 16-bit elements a register), and B (16 × N) in shared memory with N
/// contiguous (MN-major, as V_j lies: keys are rows).
template <class T, int N>
__device__ inline void wgmma_rs(float (&d)[2][N / 4], const uint32_t (&a)[4], uint64_t b, int accumulate) {
  static_assert(N == 64 || N == 128 || N == 256, "the Hopper steps use N = 64, 128 and 256 (O_i at d = 256)");
  if constexpr (N == 64 && std::is_same_v<T, __half>) FLASH_WGMMA_RS(64, "f16", "32, %33, %34, %35", "36", "37");
  else if constexpr (N == 64) FLASH_WGMMA_RS(64, "bf16", "32, %33, %34, %35", "36", "37");
  else if constexpr (N == 128 && std::is_same_v<T, __half>) FLASH_WGMMA_RS(128, "f16", "64, %65, %66, %67", "68", "69");
  else if constexpr (N == 128) FLASH_WGMMA_RS(128, "bf16", "64, %65, %66, %67", "68", "69");
  else if constexpr (std::is_same_v<T, __half>) FLASH_WGMMA_RS(256, "f16", "128, %129, %130, %131", "132", "133");
  else FLASH_WGMMA_RS(256, "bf16", "128, %129, %130, %131", "132", "133");
}

#undef FLASH_WGMMA_SS
#undef FLASH_WGMMA_RS
#undef FLASH_WGMMA_SS_MN

}  // namespace common::cuda
