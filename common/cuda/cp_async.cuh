/// \file cp_async.cuh
/// \brief Asynchronous global → shared copies (`cp.async`, sm_80 and later).
///
/// A thread issues copies that land in shared memory in the background, while it
/// computes on other data; `cp_async_wait` then waits for them. The copies do not
/// pass through registers. Other threads see the data only after a barrier.
#pragma once

namespace common::cuda {

/// Copies 16 bytes global → shared in the background; with `inside` false it
/// writes 16 zero bytes and reads nothing (the address must still be valid).
__device__ inline void cp_async_16(void* shared, const void* global, bool inside) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(global), "r"(inside ? 16 : 0)
               : "memory");
}

/// Copies 4 bytes global → shared in the background (`.ca`, the variant that takes fewer
/// than 16 bytes); with `inside` false it writes 4 zero bytes and reads nothing.
__device__ inline void cp_async_4(void* shared, const void* global, bool inside) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(to), "l"(global), "r"(inside ? 4 : 0) : "memory");
}

/// Closes the group of copies this thread issued so far.
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/// Waits until at most `kPending` of this thread's groups of copies are still in flight.
template <int kPending>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace common::cuda
