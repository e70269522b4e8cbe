/// \file mma.cuh
/// \brief The tensor-core instructions of the mma.sync steps, one thin wrapper each:
/// `ldmatrix` (shared memory → fragments) and `mma.sync.m16n8k16` (bf16/fp16 in,
/// fp32 accumulate). Packing floats into operand registers: common/cuda/convert.cuh.
///
/// Which lane holds which element of each operand is in common/cuda/fragments.hpp
/// (plain arithmetic, tested on the CPU against the PTX ISA's tables). PTX ISA
/// sections: "Warp-level matrix load instruction: ldmatrix" and "Matrix
/// multiply-accumulate operation using mma instruction" (m16n8k16, .row.col).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace common::cuda {

/// The 32-bit shared-memory address of `p` (ldmatrix and cp.async take these).
__device__ inline uint32_t shared_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

/// `ldmatrix.sync.aligned.m8n8.x4.shared.b16`: four 8×8 matrices of 16-bit
/// elements; lanes 8r..8r+7 give the shared addresses of matrix r's rows, and register
/// r of every lane receives two neighbouring elements of a row of matrix r
/// (fragments.hpp: ldmatrix_m8n8).
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

/// ldmatrix_x4 with the row's address as a pointer.
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ldmatrix_x4(r, shared_address(row)); }

/// `ldmatrix ... .trans`: as ldmatrix_x4, each 8×8 matrix delivered transposed
/// (register r receives two neighbouring elements of a column of matrix r).
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

/// ldmatrix_x4_trans with the row's address as a pointer.
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  ldmatrix_x4_trans(r, shared_address(row));
}

/// D = A·B + C on the tensor cores, in place in C: A 16×16 (a0..a3), B 16×8
/// (b0, b1), C 16×8 fp32 (c0..c3), each lane's registers as in fragments.hpp.
/// T: __nv_bfloat16 or __half, the element type of A and B.
template <class T>
__device__ inline void mma_m16n8k16(float& c0, float& c1, float& c2, float& c3, const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "bf16 or fp16");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

}  // namespace common::cuda
