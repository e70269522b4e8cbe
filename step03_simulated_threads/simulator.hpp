/// \file step03_simulated_threads/simulator.hpp
/// \brief A small simulator of CUDA's execution model that checks and counts.
///
/// A kernel is an ordinary C++ function, written with CUDA's spellings.
/// `Device::launch` runs it once per thread of every block: the threads of one
/// block are real OS threads, the blocks run one after another. This header
/// plays the part of CUDA's built-in headers, so that the kernel reads as it
/// will on a GPU:
///  - `threadIdx`, `blockIdx`, `blockDim`, `gridDim` (thread_local here),
///    `dim3` and `warpSize`;
///  - `__syncthreads()`, the block barrier, and `__shfl_xor_sync()`: threads
///    32·w … 32·w + 31 of a block form warp w, and its 32 lanes exchange values;
///  - `__global__` and `__device__`, accepted and ignored;
///  - `fmaxf`, `expf`, `logf`, `fmaf`, `INFINITY` (from <math.h>) and `min`,
///    as in device code.
/// C++ reserves names with a double underscore for the compiler and its library;
/// this header takes a few of them anyway, because the point of the step is that
/// the kernel reads like CUDA, and only the simulator's own files include it
/// (attention.hpp does not, so no other step or program ever sees them).
/// (`__restrict__` is GCC's and Clang's own keyword: it needs nothing here, and
/// it does not apply to the checked pointers below, which are classes.)
///
/// What the simulator cannot see through is a raw pointer, so a kernel's
/// pointers are `sim::Ptr<float>` and `sim::Ptr<const float>`: checked pointers
/// that support `p + n`, `p[i]` and `*p` like `float*`, and know the array they
/// point into. Global arrays are the launcher's tensors (Device::global);
/// shared ones are carved from `dynamic_shared()` (CUDA's `extern __shared__
/// float smem[]`) by pointer arithmetic, then given a name and a length with
/// sim::name() — the only line a kernel has that CUDA does not.
///
/// Every access goes through such a pointer, so the simulator can check it:
///  - shared-memory races: two threads touch one element between the same pair
///    of barriers and at least one writes (a shuffle is not a barrier);
///  - barrier divergence: threads of a block wait at different barriers, the
///    lanes of a warp at different shuffles, some threads at a barrier while
///    others wait in a shuffle, or one leaves the kernel while others wait
///    (reported, never a hang);
///  - out-of-bounds accesses: outside a named shared array, the shared memory,
///    or a global tensor; and named shared arrays that overlap;
///  - reads of shared memory that no thread has written since the launch.
/// The first finding stops the launch: `launch` throws CheckFailed, whose
/// message names the check, the array and index, the threads and the barrier
/// phase. It also counts global bytes per tensor, shared bytes, barriers and
/// shuffles.
///
/// What it cannot model: lock-step execution and warp scheduling (a warp's lanes
/// meet only at shuffles), memory coalescing and bank conflicts, caches, timing
/// and occupancy.
#pragma once

#include <math.h>  // fmaxf, expf, logf, fmaf, INFINITY in the global namespace, as in CUDA device code

#include <atomic>
#include <concepts>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <source_location>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

/// Step 3's simulator of CUDA's execution model.
namespace step03::sim {

/// CUDA's dim3: up to three extents or coordinates.
struct dim3 {
  unsigned x = 1;  ///< fastest-varying
  unsigned y = 1;  ///< middle
  unsigned z = 1;  ///< slowest-varying
  /// Extents (x, y, z); the ones left out are 1.
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  /// x·y·z
  constexpr int64_t count() const { return int64_t{x} * y * z; }
};

/// "(x,y,z)", as the reports print thread and block ids.
std::string to_string(const dim3& v);

/// The thread's index in its block, as a kernel sees it.
inline thread_local dim3 threadIdx{0, 0, 0};
/// The block's index in the grid, as a kernel sees it.
inline thread_local dim3 blockIdx{0, 0, 0};
/// The extents of a block, as a kernel sees them.
inline thread_local dim3 blockDim;
/// The extents of the grid, as a kernel sees them.
inline thread_local dim3 gridDim;
/// Threads per warp (CUDA's built-in `warpSize`).
inline constexpr int warpSize = 32;

/// The simulator's checks.
enum class Check {
  shared_race,  ///< two threads, same shared element, same barrier phase, one writes
  barrier_divergence,  ///< threads at different barriers or shuffles, or one left while others wait
  out_of_bounds,  ///< an index outside a named shared array, the shared memory or a global tensor
  overlapping_buffers,  ///< two named shared arrays share elements
  uninitialised_read,  ///< a shared element read before any thread wrote it
};

/// The check's name as the reports print it, e.g. "shared-memory race".
std::string to_string(Check check);

/// One thing a check found.
struct Finding {
  Check check = Check::shared_race;  ///< which check
  std::string buffer;  ///< the array, e.g. "Kj" or "K" (empty for divergence)
  int64_t index = -1;  ///< element index in that array (-1 when none)
  std::string block;  ///< the block, "(x,y,z)"
  std::vector<std::string> threads;  ///< the threads involved, "(x,y,z)" each
  int64_t phase = 0;  ///< barrier phase: barriers the block had passed
  std::string message;  ///< the full report, several lines
};

/// Thrown by Device::launch when a check found something; `what()` is the report.
class CheckFailed : public std::runtime_error {
 public:
  /// The first finding, and how many more the launch made before it stopped.
  CheckFailed(Finding first, int64_t more);
  /// The first finding.
  const Finding& finding() const { return finding_; }

 private:
  Finding finding_;
};

/// Counters of one launch, summed over all blocks and threads.
struct Counters {
  /// Global bytes moved for one tensor.
  struct Tensor {
    std::string name;  ///< as given to Device::global
    int64_t read_bytes = 0;  ///< bytes loaded
    int64_t write_bytes = 0;  ///< bytes stored
  };
  std::vector<Tensor> global;  ///< per tensor, in the order they were declared
  int64_t smem_read_bytes = 0;  ///< bytes loaded from shared memory
  int64_t smem_write_bytes = 0;  ///< bytes stored to shared memory
  int64_t barriers = 0;  ///< barriers passed, summed over blocks
  int64_t shuffles = 0;  ///< warp shuffles (one per warp for all its 32 lanes), summed over warps
  /// Total global bytes read.
  int64_t global_read_bytes() const;
  /// Total global bytes written.
  int64_t global_write_bytes() const;
  /// The counters by name, as a program prints them: "Q_read_bytes" … for each
  /// tensor and direction it was moved in, then "smem_read_bytes",
  /// "smem_write_bytes", "barriers", "shuffles".
  std::vector<std::pair<std::string, double>> named() const;
};

namespace detail {
struct BlockState;
/// Thrown inside a simulated thread to end it once the launch is stopped.
struct Abort {};

/// What the simulator knows about the calling thread (kept in a thread_local).
struct ThreadContext {
  BlockState* block = nullptr;  ///< its block
  int64_t tid = 0;  ///< linear thread id in the block
  int64_t phase = 0;  ///< barriers passed so far
  std::source_location last_barrier{};  ///< the last barrier passed
  int64_t smem_read = 0;  ///< shared floats loaded
  int64_t smem_write = 0;  ///< shared floats stored
  std::vector<int64_t> global_read;  ///< global floats loaded, per tensor
  std::vector<int64_t> global_write;  ///< global floats stored, per tensor
};
/// The calling thread's context; null outside a kernel.
inline thread_local ThreadContext* this_thread = nullptr;

/// An array a pointer points into: a global tensor, the block's shared memory,
/// or a named array carved from it.
struct Array {
  std::string name;  ///< "Q", "smem", "Kj", …: how the reports name it
  bool shared = false;  ///< in the block's shared memory (else global)
  int64_t first = 0;  ///< shared: its first float in the block's shared memory
  int64_t size = 0;  ///< its length in floats
  float* data = nullptr;  ///< global: the tensor's floats
  int tensor = -1;  ///< global: the tensor's number, for the counters
};

/// Loads shared element `element` of `array`, checked.
float shared_load(const Array& array, int64_t element);
/// Stores shared element `element` of `array`, checked.
void shared_store(const Array& array, int64_t element, float value);
/// Reports an access through a pointer that points nowhere, or outside a kernel.
[[noreturn]] void bad_access(const Array* array);
/// Reports a global access to element `base + index` of `array` outside it and
/// ends the thread (`base`: where the pointer points, `index`: the kernel's index).
[[noreturn]] void global_out_of_bounds(const Array& array, int64_t base, int64_t index);

/// Loads element `base + index` of `array`, checked and counted.
inline float load(const Array* array, int64_t base, int64_t index) {
  if (array == nullptr) bad_access(array);
  const int64_t e = base + index;
  if (array->shared) return shared_load(*array, e);
  ThreadContext* ctx = this_thread;
  if (ctx == nullptr) bad_access(array);
  if (e < 0 || e >= array->size) global_out_of_bounds(*array, base, index);
  ++ctx->global_read[size_t(array->tensor)];
  // Relaxed atomics: a racy kernel stays defined behaviour in C++ (see simulator.cpp).
  return std::atomic_ref<float>(array->data[e]).load(std::memory_order_relaxed);
}

/// Stores `value` to element `base + index` of `array`, checked and counted.
inline void store(const Array* array, int64_t base, int64_t index, float value) {
  if (array == nullptr) bad_access(array);
  const int64_t e = base + index;
  if (array->shared) return shared_store(*array, e, value);
  ThreadContext* ctx = this_thread;
  if (ctx == nullptr) bad_access(array);
  if (e < 0 || e >= array->size) global_out_of_bounds(*array, base, index);
  ++ctx->global_write[size_t(array->tensor)];
  std::atomic_ref<float>(array->data[e]).store(value, std::memory_order_relaxed);
}
}  // namespace detail

template <class T>
class Ptr;
Ptr<float> dynamic_shared();
void name(Ptr<float>& p, const char* name, int64_t count);

/// A checked pointer: CUDA's `float*` (T = float) or `const float*` (T = const
/// float), into global or shared memory. `p + n`, `p - n`, `p[i]` and `*p` work
/// as on a raw pointer; every access is bounds-checked against the array the
/// pointer points into, counted, and in shared memory checked for races and
/// uninitialised reads. Arithmetic itself is never checked, as in C++: only an
/// access is.
template <class T>
class Ptr {
  static_assert(std::is_same_v<std::remove_const_t<T>, float>, "the simulator's arrays hold floats");

 public:
  /// One element, read by converting to float and, for T = float, written by assigning.
  class Ref {
   public:
    /// Reads the element.
    operator float() const { return detail::load(array_, base_, index_); }
    /// Writes the element.
    const Ref& operator=(float v) const {
      static_assert(!std::is_const_v<T>, "an element of a const float array cannot be written");
      detail::store(array_, base_, index_, v);
      return *this;
    }
    /// Copies another element of the same kind of array (a read, then a write).
    const Ref& operator=(const Ref& other) const { return *this = static_cast<float>(other); }

   private:
    friend class Ptr;
    Ref(const detail::Array* array, int64_t base, int64_t index) : array_(array), base_(base), index_(index) {}
    const detail::Array* array_;
    int64_t base_;
    int64_t index_;
  };

  /// A pointer that points nowhere (any access through it is an error).
  Ptr() = default;
  /// A `float*` converts to a `const float*`.
  template <class U>
  requires(std::is_const_v<T> && !std::is_const_v<U>) Ptr(const Ptr<U>& p) : array_(p.array_), offset_(p.offset_) {}

  /// Element `i` from here, `p[i]`.
  Ref operator[](std::integral auto i) const { return Ref(array_, offset_, static_cast<int64_t>(i)); }
  /// The element here, `*p`.
  Ref operator*() const { return Ref(array_, offset_, 0); }
  /// The pointer `n` elements further, `p + n`.
  Ptr operator+(std::integral auto n) const { return Ptr(array_, offset_ + static_cast<int64_t>(n)); }
  /// The pointer `n` elements back, `p - n`.
  Ptr operator-(std::integral auto n) const { return Ptr(array_, offset_ - static_cast<int64_t>(n)); }
  /// `n + p`.
  friend Ptr operator+(std::integral auto n, const Ptr& p) { return p + n; }
  /// The name of the array it points into, e.g. "Kj" or "Q".
  const char* name() const { return array_ ? array_->name.c_str() : "(null)"; }
  /// Elements from the start of that array to where it points.
  int64_t offset() const { return offset_; }

 private:
  template <class>
  friend class Ptr;
  friend class Device;
  friend Ptr<float> sim::dynamic_shared();
  friend void sim::name(Ptr<float>& p, const char* name, int64_t count);
  Ptr(const detail::Array* array, int64_t offset) : array_(array), offset_(offset) {}
  const detail::Array* array_ = nullptr;
  int64_t offset_ = 0;
};

/// A pointer to the calling block's dynamic shared memory (CUDA: `extern
/// __shared__ float smem[]`), whose size the launch gives. A kernel carves its
/// arrays from it by pointer arithmetic and names them with sim::name().
Ptr<float> dynamic_shared();

/// Gives the shared array that `p` points to a name and a length of `count`
/// floats, for the reports and the checks: afterwards `p` points to the start of
/// the array `name`, and an access through it (or a pointer made from it) past
/// `count` floats is out of bounds. An array that does not fit in the shared
/// memory is reported as out of bounds, one that overlaps an array named before
/// as overlapping buffers. Every thread names the same arrays; naming one again
/// with the same place and length is no change.
void name(Ptr<float>& p, const char* name, int64_t count);

/// One shared array for the list form of name(): the pointer that points to
/// it, its name and its length in floats.
struct Named {
  Ptr<float>& p;  ///< the pointer (rebound to the named array)
  const char* name;  ///< e.g. "Kj"
  int64_t count;  ///< length in floats
};

/// name() for several arrays, in order: `sim::name({{Kj, "Kj", Bc * ld}, ...})`.
void name(std::initializer_list<Named> arrays);

/// The simulated GPU: it knows the global tensors and launches kernels.
class Device {
 public:
  /// An input tensor in global memory (CUDA: cudaMalloc + cudaMemcpy).
  Ptr<const float> global(const std::string& name, const std::vector<float>& data);
  /// An output or working tensor in global memory, `count` floats at `data`.
  Ptr<float> global(const std::string& name, float* data, int64_t count);

  /// Show progress on stderr during launches (when `enabled`; see
  /// common::Progress): blocks done, and within a block the barriers thread 0
  /// has passed out of `barriers_per_block`, so that one long block still moves
  /// the bar.
  void show_progress(bool enabled, int64_t barriers_per_block);

  /// Runs `kernel(args...)` on every thread of a `grid` of `block`-sized blocks
  /// with `shared_bytes` of dynamic shared memory per block (CUDA:
  /// `kernel<<<grid, block, shared_bytes>>>(args...)`). Blocks run one after
  /// another; a block's threads run as OS threads. Throws CheckFailed on the
  /// first finding, std::invalid_argument for a launch CUDA would refuse (or a
  /// shuffle the simulator does not model), and whatever else the kernel threw.
  template <class Kernel, class... Args>
  Counters launch(dim3 grid, dim3 block, int64_t shared_bytes, Kernel kernel, Args... args) {
    return run(grid, block, shared_bytes, [&] { kernel(args...); });
  }

 private:
  Counters run(dim3 grid, dim3 block, int64_t shared_bytes, const std::function<void()>& body);
  std::deque<detail::Array> tensors_;  // deque: pointers point at their arrays
  bool progress_ = false;
  int64_t barriers_per_block_ = 0;
};

}  // namespace step03::sim

// CUDA's spellings, in the global namespace as CUDA has them (see the file comment).
using step03::sim::blockDim;
using step03::sim::blockIdx;
using step03::sim::dim3;
using step03::sim::gridDim;
using step03::sim::threadIdx;
using step03::sim::warpSize;

/// CUDA's kernel qualifier: nothing to the simulator.
#define __global__
/// CUDA's device-function qualifier: nothing to the simulator.
#define __device__

/// CUDA's `__syncthreads()`: waits until every thread of the block has reached
/// this barrier. Threads reaching different barriers (source lines) is reported.
void __syncthreads(std::source_location site = std::source_location::current());

/// CUDA's `__shfl_xor_sync(mask, var, laneMask, width)`: waits until all 32
/// lanes of the calling thread's warp have called it, then returns the `var` of
/// lane `lane ^ laneMask`. Lanes at different shuffles, or a lane that leaves
/// the kernel while the others wait, is barrier divergence. The simulator models
/// whole-warp shuffles only: a `mask` other than 0xffffffff, a `laneMask`
/// outside [0, 32), a `width` other than 32 or a warp of fewer than 32 threads
/// (a block whose size is not a multiple of 32) is refused with
/// std::invalid_argument out of Device::launch.
float __shfl_xor_sync(unsigned mask, float var, int laneMask, int width = warpSize,
                      std::source_location site = std::source_location::current());

/// CUDA's `min` of device code, for the int the kernels use.
inline int min(int a, int b) { return a < b ? a : b; }
