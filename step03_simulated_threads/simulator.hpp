/// \file step03_simulated_threads/simulator.hpp
/// \brief A small simulator of CUDA's execution model that checks and counts.
///
/// A kernel is an ordinary C++ function. `Device::launch` runs it once per
/// thread of every block: the threads of one block are real OS threads, the
/// blocks run one after another. Inside the kernel the CUDA names work as on a
/// GPU: `threadIdx`, `blockIdx`, `blockDim`, `gridDim` (thread_local here),
/// `syncthreads()` (CUDA's `__syncthreads()`), `shfl_xor_sync()` (CUDA's
/// `__shfl_xor_sync()`: threads 32·w … 32·w + 31 of a block form warp w, and its
/// 32 lanes exchange values), dynamic shared memory (`dynamic_shared()`, carved
/// into named views) and global memory (`Global` views of the problem's tensors).
///
/// Every access goes through a view, so the simulator can check it:
///  - shared-memory races: two threads touch one element between the same pair
///    of barriers and at least one writes (a shuffle is not a barrier);
///  - barrier divergence: threads of a block wait at different barriers, the
///    lanes of a warp at different shuffles, some threads at a barrier while
///    others wait in a shuffle, or one leaves the kernel while others wait
///    (reported, never a hang);
///  - out-of-bounds shared or global accesses, and shared views that overlap;
///  - reads of shared memory that no thread has written since the launch.
/// The first finding stops the launch: `launch` throws CheckFailed, whose
/// message names the check, the buffer and index, the threads and the barrier
/// phase. It also counts global bytes per tensor, shared bytes, barriers and
/// shuffles.
///
/// What it cannot model: lock-step execution and warp scheduling (a warp's lanes
/// meet only at shuffles), memory coalescing and bank conflicts, caches, timing
/// and occupancy.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <source_location>
#include <stdexcept>
#include <string>
#include <type_traits>
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

/// The simulator's checks.
enum class Check {
  shared_race,          ///< two threads, same shared element, same barrier phase, one writes
  barrier_divergence,   ///< threads at different barriers or shuffles, or one left while others wait
  out_of_bounds,        ///< an index outside a shared or global view
  overlapping_buffers,  ///< two named shared views share elements
  uninitialised_read,   ///< a shared element read before any thread wrote it
};

/// The check's name as the reports print it, e.g. "shared-memory race".
std::string to_string(Check check);

/// One thing a check found.
struct Finding {
  Check check = Check::shared_race;  ///< which check
  std::string buffer;                ///< the view, e.g. "Kj" or "K" (empty for divergence)
  int64_t index = -1;                ///< element index in that view (-1 when none)
  std::string block;                 ///< the block, "(x,y,z)"
  std::vector<std::string> threads;  ///< the threads involved, "(x,y,z)" each
  int64_t phase = 0;                 ///< barrier phase: barriers the block had passed
  std::string message;               ///< the full report, several lines
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
    std::string name;         ///< as given to Device::global
    int64_t read_bytes = 0;   ///< bytes loaded
    int64_t write_bytes = 0;  ///< bytes stored
  };
  std::vector<Tensor> global;    ///< per tensor, in the order they were declared
  int64_t smem_read_bytes = 0;   ///< bytes loaded from shared memory
  int64_t smem_write_bytes = 0;  ///< bytes stored to shared memory
  int64_t barriers = 0;          ///< barriers passed, summed over blocks
  int64_t shuffles = 0;          ///< warp shuffles (one per warp for all its 32 lanes), summed over warps
  /// Total global bytes read.
  int64_t global_read_bytes() const;
  /// Total global bytes written.
  int64_t global_write_bytes() const;
};

/// Threads per warp (CUDA's built-in `warpSize`).
inline constexpr int warpSize = 32;

namespace detail {
struct BlockState;
/// Thrown inside a simulated thread to end it once the launch is stopped.
struct Abort {};

/// What the simulator knows about the calling thread (kept in a thread_local).
struct ThreadContext {
  BlockState* block = nullptr;      ///< its block
  int64_t tid = 0;                  ///< linear thread id in the block
  int64_t phase = 0;                ///< barriers passed so far
  std::source_location last_barrier{};  ///< the last barrier passed
  int64_t smem_read = 0;            ///< shared floats loaded
  int64_t smem_write = 0;           ///< shared floats stored
  std::vector<int64_t> global_read;   ///< global floats loaded, per tensor
  std::vector<int64_t> global_write;  ///< global floats stored, per tensor
};
/// The calling thread's context; null outside a kernel.
inline thread_local ThreadContext* this_thread = nullptr;

/// Loads shared element `index` of view (`name`, `offset`, `count`), checked.
float shared_load(const char* name, int64_t offset, int64_t count, int64_t index);
/// Stores shared element `index` of view (`name`, `offset`, `count`), checked.
void shared_store(const char* name, int64_t offset, int64_t count, int64_t index, float value);
/// Reports an out-of-bounds global access and ends the thread.
[[noreturn]] void global_out_of_bounds(const std::string& name, int64_t base, int64_t count, int64_t index,
                                       int64_t tensor_size);
}  // namespace detail

/// A named view of `count` floats of the block's shared memory from `offset`.
/// Every access is bounds-checked and checked for races and uninitialised reads.
class Shared {
 public:
  /// One element, read by converting to float and written by assigning.
  class Ref {
   public:
    /// Reads the element.
    operator float() const { return detail::shared_load(view_->name_, view_->offset_, view_->count_, i_); }
    /// Writes the element.
    const Ref& operator=(float v) const {
      detail::shared_store(view_->name_, view_->offset_, view_->count_, i_, v);
      return *this;
    }
    /// Copies another element (a read, then a write).
    const Ref& operator=(const Ref& other) const { return *this = static_cast<float>(other); }

   private:
    friend class Shared;
    Ref(const Shared* view, int64_t i) : view_(view), i_(i) {}
    const Shared* view_;
    int64_t i_;
  };

  /// Element `i` of the view.
  Ref operator[](int64_t i) const { return Ref(this, i); }
  /// The view's name.
  const char* name() const { return name_; }
  /// Its first float in the arena (CUDA: the pointer's distance from `smem`).
  int64_t offset() const { return offset_; }
  /// Its length in floats.
  int64_t size() const { return count_; }

 private:
  friend class SharedArena;
  Shared(const char* name, int64_t offset, int64_t count) : name_(name), offset_(offset), count_(count) {}
  const char* name_;
  int64_t offset_;
  int64_t count_;
};

/// The block's dynamic shared memory (CUDA's `extern __shared__ float smem[]`),
/// handed out as named views so that the layout is explicit.
class SharedArena {
 public:
  /// The view `name` of `count` floats from float `offset`. Reports a view that
  /// does not fit in the arena (out_of_bounds) or overlaps another name
  /// (overlapping_buffers).
  Shared view(const char* name, int64_t offset, int64_t count) const;
  /// The arena's size in floats (the launch's shared bytes / 4).
  int64_t size() const;
};

/// The calling block's dynamic shared memory.
SharedArena dynamic_shared();

/// Waits until every thread of the block has reached this barrier (CUDA's
/// `__syncthreads()`). Threads reaching different barriers is reported.
void syncthreads(std::source_location site = std::source_location::current());

/// CUDA's `__shfl_xor_sync(mask, value, lane_mask)`: waits until all 32 lanes of
/// the calling thread's warp have called it, then returns the `value` of lane
/// `lane ^ lane_mask`. Lanes at different shuffles, or a lane that leaves the
/// kernel while the others wait, is barrier divergence. The simulator models
/// whole-warp shuffles only: a `mask` other than 0xffffffff, a `lane_mask`
/// outside [0, 32) or a warp of fewer than 32 threads (a block whose size is not
/// a multiple of 32) is refused with std::invalid_argument out of
/// Device::launch.
float shfl_xor_sync(unsigned mask, float value, int lane_mask,
                    std::source_location site = std::source_location::current());

/// A checked view of global memory: `count` elements of a tensor from `base`.
/// `T` is `const float` for inputs and `float` for outputs.
template <class T>
class Global {
 public:
  /// One element, read by converting to float and, for non-const T, written by assigning.
  class Ref {
   public:
    /// Reads the element.
    operator float() const { return view_->load(i_); }
    /// Writes the element.
    const Ref& operator=(float v) const
      requires(!std::is_const_v<T>)
    {
      view_->store(i_, v);
      return *this;
    }

   private:
    friend class Global;
    Ref(const Global* view, int64_t i) : view_(view), i_(i) {}
    const Global* view_;
    int64_t i_;
  };

  /// Element `i` of the view.
  Ref operator[](int64_t i) const { return Ref(this, i); }
  /// The `count` elements from `offset` of this view (CUDA: `pointer + offset`),
  /// e.g. one head of a (B, H, N, d) tensor. A slice past the end is reported.
  Global slice(int64_t offset, int64_t count) const {
    if (offset < 0 || count < 0 || offset + count > count_) {
      detail::global_out_of_bounds(*name_, base_, count_, offset < 0 ? offset : offset + count - 1, tensor_size_);
    }
    Global s = *this;
    s.data_ += offset;
    s.base_ += offset;
    s.count_ = count;
    return s;
  }
  /// Its length in elements.
  int64_t size() const { return count_; }

 private:
  friend class Device;
  Global(const std::string* name, int tensor, T* data, int64_t count)
      : name_(name), tensor_(tensor), data_(data), count_(count), tensor_size_(count) {}
  float load(int64_t i) const {
    check(i);
    ++detail::this_thread->global_read[tensor_];
    if constexpr (std::is_const_v<T>) {
      return data_[i];  // inputs are never written: a plain load cannot race
    } else {
      return std::atomic_ref<float>(data_[i]).load(std::memory_order_relaxed);
    }
  }
  void store(int64_t i, float v) const {
    check(i);
    ++detail::this_thread->global_write[tensor_];
    std::atomic_ref<float>(data_[i]).store(v, std::memory_order_relaxed);
  }
  void check(int64_t i) const {
    if (i < 0 || i >= count_) detail::global_out_of_bounds(*name_, base_, count_, i, tensor_size_);
  }
  const std::string* name_;
  int tensor_;
  T* data_;
  int64_t count_;
  int64_t base_ = 0;
  int64_t tensor_size_;
};

/// The simulated GPU: it knows the global tensors and launches kernels.
class Device {
 public:
  /// An input tensor in global memory (CUDA: cudaMalloc + cudaMemcpy).
  Global<const float> global(const std::string& name, const std::vector<float>& data);
  /// An output or working tensor in global memory, `count` floats at `data`.
  Global<float> global(const std::string& name, float* data, int64_t count);

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
  std::deque<std::string> names_;  // deque: Global views point at their names
};

}  // namespace step03::sim
