/// \file step03_simulated_threads/simulator.cpp
/// \brief The simulator's machinery: blocks of OS threads, the barrier, the shadow of shared memory.
///
/// How the checks work:
///  - Every shared float has three shadow words. `written` holds (phase + 1,
///    thread) of its last write; `read` and `read2` hold (phase + 1, thread) of
///    its first reader in that phase and of a second, different one — enough to
///    name a reader other than any later writer. A phase is the stretch between two
///    barriers; all threads of a block agree on it, because a barrier is passed
///    by all or none. A read checks `written` (never written: uninitialised; written
///    by another thread in this phase: race); a write checks both words. The
///    shadow words are updated before they are checked, with sequentially
///    consistent atomics, so of two threads touching an element at once at least
///    one sees the other: no race slips through, whatever the timing.
///  - Each thread notes where it arrives (the barrier's source line, or "left the
///    kernel") before it arrives; the barrier's completion step, which runs once
///    all have arrived, compares the notes. A thread that leaves calls
///    `arrive_and_drop`, so the others never wait for it: divergence is reported,
///    never a hang.
///  - A finding stops the launch: the thread that made it ends, the others end
///    at their next access or barrier, and `launch` throws the first finding.
#include "simulator.hpp"

#include <algorithm>
#include <barrier>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "common/workspace.hpp"

namespace step03::sim {

std::string to_string(const dim3& v) {
  std::ostringstream s;
  s << "(" << v.x << "," << v.y << "," << v.z << ")";
  return s.str();
}

std::string to_string(Check check) {
  switch (check) {
    case Check::shared_race: return "shared-memory race";
    case Check::barrier_divergence: return "barrier divergence";
    case Check::out_of_bounds: return "out-of-bounds access";
    case Check::overlapping_buffers: return "overlapping shared buffers";
    case Check::uninitialised_read: return "uninitialised shared read";
  }
  return "unknown check";
}

CheckFailed::CheckFailed(Finding first, int64_t more)
    : std::runtime_error(first.message +
                         (more > 0 ? "\n  (" + std::to_string(more) + " more finding(s) before the launch stopped)" : "")),
      finding_(std::move(first)) {}

int64_t Counters::global_read_bytes() const {
  int64_t sum = 0;
  for (const Tensor& t : global) sum += t.read_bytes;
  return sum;
}

int64_t Counters::global_write_bytes() const {
  int64_t sum = 0;
  for (const Tensor& t : global) sum += t.write_bytes;
  return sum;
}

namespace detail {

namespace {

/// A shadow word: (phase + 1) in the high 32 bits, so 0 means "never"; the
/// thread in the low 32 bits.
constexpr uint64_t kThreadMask = 0xffffffffu;
uint64_t shadow(int64_t phase, int64_t tid) { return (uint64_t(phase + 1) << 32) | uint64_t(tid); }
int64_t shadow_phase(uint64_t w) { return int64_t(w >> 32) - 1; }
int64_t shadow_thread(uint64_t w) { return int64_t(w & kThreadMask); }

std::string file_and_line(const std::source_location& site) {
  const char* file = site.file_name();
  if (const char* slash = std::strrchr(file, '/')) file = slash + 1;
  return std::string(file) + ":" + std::to_string(site.line());
}

/// Where a thread stands at a barrier: at a source line, or gone.
struct Arrival {
  int64_t phase = -1;  ///< the phase it arrived in
  bool left = false;   ///< it left the kernel (arrive_and_drop)
  std::source_location site{};
};

/// A named shared view, for the overlap check.
struct ViewRecord {
  std::string name;
  int64_t offset, count;
};

}  // namespace

/// One block being run: its shared memory with shadow, its barrier, its findings.
struct BlockState {
  /// The barrier's completion step: runs once per phase, after all arrived.
  struct Completion {
    BlockState* block;
    void operator()() noexcept { block->complete_phase(); }
  };

  BlockState(dim3 idx_, dim3 dim_, int64_t arena_floats)
      : idx(idx_), dim(dim_), threads(dim_.count()), arena(static_cast<size_t>(arena_floats)),
        written(new std::atomic<uint64_t>[static_cast<size_t>(arena_floats)]()),
        read(new std::atomic<uint64_t>[static_cast<size_t>(arena_floats)]()),
        read2(new std::atomic<uint64_t>[static_cast<size_t>(arena_floats)]()),
        arrivals(static_cast<size_t>(dim_.count())), barrier(dim_.count(), Completion{this}) {}

  dim3 thread_of(int64_t tid) const {
    return dim3(unsigned(tid % dim.x), unsigned(tid / dim.x % dim.y), unsigned(tid / (int64_t{dim.x} * dim.y)));
  }
  std::string thread_name(int64_t tid) const { return to_string(thread_of(tid)); }

  /// "barrier phase 7 (after the barrier at attention.cpp:210)".
  static std::string phase_name(int64_t phase, const std::source_location& last) {
    if (phase == 0) return "barrier phase 0 (before the first barrier)";
    return "barrier phase " + std::to_string(phase) + " (after the barrier at " + file_and_line(last) + ")";
  }

  /// Records a finding (the first one is kept) and stops the launch.
  void report(Finding f) {
    std::lock_guard lock(findings_mutex);
    if (first) {
      ++more;
    } else {
      f.block = to_string(idx);
      first = std::move(f);
    }
    cancelled.store(true);
  }

  /// Builds the finding for the calling thread and ends the thread.
  [[noreturn]] void fail(Check check, std::string buffer, int64_t index, std::vector<int64_t> others,
                         const std::string& what) {
    const ThreadContext& ctx = *this_thread;
    Finding f;
    f.check = check;
    f.buffer = std::move(buffer);
    f.index = index;
    f.phase = ctx.phase;
    f.threads.push_back(thread_name(ctx.tid));
    for (int64_t t : others) f.threads.push_back(thread_name(t));
    std::ostringstream m;
    m << to_string(check) << ": " << what << "\n  block " << to_string(idx) << ", thread " << thread_name(ctx.tid)
      << ", " << phase_name(ctx.phase, ctx.last_barrier);
    f.message = m.str();
    report(std::move(f));
    throw Abort{};
  }

  void complete_phase() noexcept {
    std::vector<int64_t> left;
    std::vector<std::pair<std::source_location, std::vector<int64_t>>> sites;
    for (int64_t t = 0; t < threads; ++t) {
      const Arrival& a = arrivals[size_t(t)];
      if (a.phase != phase) continue;  // left in an earlier phase
      if (a.left) {
        left.push_back(t);
        continue;
      }
      auto same = std::find_if(sites.begin(), sites.end(), [&](const auto& s) {
        return s.first.line() == a.site.line() && std::strcmp(s.first.file_name(), a.site.file_name()) == 0;
      });
      if (same == sites.end()) {
        sites.push_back({a.site, {t}});
      } else {
        same->second.push_back(t);
      }
    }
    const int64_t this_phase = phase++;
    if (sites.empty()) return;  // every thread left the kernel: the launch is over
    if (left.empty() && sites.size() == 1) {
      ++barriers;
      return;
    }
    if (cancelled.load()) return;  // a stopped launch: threads leave early, nothing new to say

    const auto list = [&](const std::vector<int64_t>& ts) {
      std::string s;
      const size_t shown = std::min<size_t>(ts.size(), 4);
      for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + thread_name(ts[i]);
      if (ts.size() > shown) s += " and " + std::to_string(ts.size() - shown) + " more";
      return s;
    };
    Finding f;
    f.check = Check::barrier_divergence;
    f.phase = this_phase;
    std::ostringstream m;
    m << to_string(Check::barrier_divergence) << ": the threads of block " << to_string(idx)
      << " did not all reach the same barrier\n";
    for (const auto& [site, ts] : sites) {
      m << "  threads " << list(ts) << " wait at the barrier at " << file_and_line(site) << "\n";
      f.threads.push_back(thread_name(ts.front()));
    }
    if (!left.empty()) {
      m << "  threads " << list(left) << " have left the kernel\n";
      f.threads.push_back(thread_name(left.front()));
    }
    m << "  barrier phase " << this_phase << ": each of them had passed " << this_phase << " barrier(s)";
    f.message = m.str();
    report(std::move(f));
  }

  dim3 idx, dim;
  int64_t threads;
  common::Workspace<std::atomic<float>> arena;  // the block's shared memory, counted as working memory
  // The shadow (simulator bookkeeping): the last write, the first reader and a
  // second, different reader of each float in the phase they happened in.
  std::unique_ptr<std::atomic<uint64_t>[]> written, read, read2;
  std::mutex views_mutex;
  std::vector<ViewRecord> views;
  std::vector<Arrival> arrivals;
  int64_t phase = 0;     // touched only by the completion step
  int64_t barriers = 0;  // likewise
  std::atomic<bool> cancelled{false};
  std::mutex findings_mutex;
  std::optional<Finding> first;
  int64_t more = 0;
  std::exception_ptr error;
  std::barrier<Completion> barrier;
};

namespace {

BlockState& current_block() {
  if (this_thread == nullptr) throw std::logic_error("a simulator call outside a kernel");
  return *this_thread->block;
}

std::string range(int64_t offset, int64_t count) {
  std::ostringstream s;
  s << "[" << offset << ", " << offset + count << ")";
  return s.str();
}

/// Checks index `i` of a shared view and returns its element in the arena.
int64_t shared_element(BlockState& b, const char* name, int64_t offset, int64_t count, int64_t i) {
  if (b.cancelled.load(std::memory_order_relaxed)) throw Abort{};
  if (i < 0 || i >= count) {
    b.fail(Check::out_of_bounds, name, i, {},
           "shared " + std::string(name) + "[" + std::to_string(i) + "] is outside " + name + "'s " +
               std::to_string(count) + " elements (arena floats " + range(offset, count) + ")");
  }
  return offset + i;
}

}  // namespace

float shared_load(const char* name, int64_t offset, int64_t count, int64_t i) {
  BlockState& b = current_block();
  ThreadContext& ctx = *this_thread;
  const int64_t a = shared_element(b, name, offset, count, i);
  // Note this read first (as the first reader, or as a second, different one),
  // then look for a write by another thread in this phase.
  const uint64_t me = shadow(ctx.phase, ctx.tid);
  uint64_t r = b.read[a].load();
  while (shadow_phase(r) != ctx.phase && !b.read[a].compare_exchange_weak(r, me)) {
  }
  if (shadow_phase(r) == ctx.phase && shadow_thread(r) != ctx.tid) {
    uint64_t r2 = b.read2[a].load();
    while (shadow_phase(r2) != ctx.phase && !b.read2[a].compare_exchange_weak(r2, me)) {
    }
  }
  const uint64_t w = b.written[a].load();
  const auto element = [&] { return std::string(name) + "[" + std::to_string(i) + "]"; };
  if (w == 0) {
    b.fail(Check::uninitialised_read, name, i, {},
           "shared " + element() + " is read, but no thread has written it since the launch");
  }
  if (shadow_phase(w) == ctx.phase && shadow_thread(w) != ctx.tid) {
    b.fail(Check::shared_race, name, i, {shadow_thread(w)},
           "shared " + element() + " is read by thread " + b.thread_name(ctx.tid) + " and written by thread " +
               b.thread_name(shadow_thread(w)) + " with no barrier between them");
  }
  ++ctx.smem_read;
  return b.arena[size_t(a)].load(std::memory_order_relaxed);
}

void shared_store(const char* name, int64_t offset, int64_t count, int64_t i, float value) {
  BlockState& b = current_block();
  ThreadContext& ctx = *this_thread;
  const int64_t a = shared_element(b, name, offset, count, i);
  // Note this write first, then look for another thread's access in this phase.
  const uint64_t w = b.written[a].exchange(shadow(ctx.phase, ctx.tid));
  const auto element = [&] { return std::string(name) + "[" + std::to_string(i) + "]"; };
  if (shadow_phase(w) == ctx.phase && shadow_thread(w) != ctx.tid) {
    b.fail(Check::shared_race, name, i, {shadow_thread(w)},
           "shared " + element() + " is written by thread " + b.thread_name(ctx.tid) + " and by thread " +
               b.thread_name(shadow_thread(w)) + " with no barrier between them");
  }
  for (const uint64_t r : {b.read[a].load(), b.read2[a].load()}) {
    if (shadow_phase(r) == ctx.phase && shadow_thread(r) != ctx.tid) {
      b.fail(Check::shared_race, name, i, {shadow_thread(r)},
             "shared " + element() + " is written by thread " + b.thread_name(ctx.tid) + " and read by thread " +
                 b.thread_name(shadow_thread(r)) + " with no barrier between them");
    }
  }
  ++ctx.smem_write;
  b.arena[size_t(a)].store(value, std::memory_order_relaxed);
}

void global_out_of_bounds(const std::string& name, int64_t base, int64_t count, int64_t index, int64_t tensor_size) {
  if (this_thread == nullptr) throw std::out_of_range("global " + name + ": index outside the tensor");
  BlockState& b = *this_thread->block;
  b.fail(Check::out_of_bounds, name, index, {},
         "global " + name + "[" + std::to_string(index) + "] is outside the view of " + std::to_string(count) +
             " elements (" + name + " elements " + range(base, count) + " of " + std::to_string(tensor_size) +
             ")");
}

}  // namespace detail

SharedArena dynamic_shared() {
  detail::current_block();
  return SharedArena{};
}

int64_t SharedArena::size() const { return int64_t(detail::current_block().arena.size()); }

Shared SharedArena::view(const char* name, int64_t offset, int64_t count) const {
  detail::BlockState& b = detail::current_block();
  if (offset < 0 || count < 0 || offset + count > size()) {
    b.fail(Check::out_of_bounds, name, offset + count - 1, {},
           "shared view " + std::string(name) + " " + detail::range(offset, count) + " does not fit in the " +
               std::to_string(size()) + "-float dynamic shared memory");
  }
  std::unique_lock lock(b.views_mutex);
  for (const detail::ViewRecord& v : b.views) {
    const bool same_name = v.name == name;
    if (same_name && v.offset == offset && v.count == count) return Shared(name, offset, count);
    const int64_t lo = std::max(v.offset, offset), hi = std::min(v.offset + v.count, offset + count);
    if (same_name || lo < hi) {
      lock.unlock();
      b.fail(Check::overlapping_buffers, name, lo - offset, {},
             "shared view " + std::string(name) + " " + detail::range(offset, count) +
                 (same_name ? " was carved before as " : " overlaps ") + v.name + " " +
                 detail::range(v.offset, v.count) +
                 (same_name ? ""
                            : " in floats " + detail::range(lo, hi - lo) + ": " + name + "[" +
                                  std::to_string(lo - offset) + "] is " + v.name + "[" + std::to_string(lo - v.offset) +
                                  "]"));
    }
  }
  b.views.push_back({name, offset, count});
  return Shared(name, offset, count);
}

void syncthreads(std::source_location site) {
  detail::BlockState& b = detail::current_block();
  detail::ThreadContext& ctx = *detail::this_thread;
  if (b.cancelled.load()) throw detail::Abort{};
  b.arrivals[size_t(ctx.tid)] = detail::Arrival{ctx.phase, false, site};
  b.barrier.arrive_and_wait();
  if (b.cancelled.load()) throw detail::Abort{};
  ++ctx.phase;
  ctx.last_barrier = site;
}

Global<const float> Device::global(const std::string& name, const std::vector<float>& data) {
  names_.push_back(name);
  return Global<const float>(&names_.back(), int(names_.size()) - 1, data.data(), int64_t(data.size()));
}

Global<float> Device::global(const std::string& name, float* data, int64_t count) {
  names_.push_back(name);
  return Global<float>(&names_.back(), int(names_.size()) - 1, data, count);
}

Counters Device::run(dim3 grid, dim3 block, int64_t shared_bytes, const std::function<void()>& body) {
  if (block.count() < 1 || block.count() > 1024) {
    throw std::invalid_argument("a block has 1 to 1024 threads, not " + std::to_string(block.count()));
  }
  if (grid.count() < 1) throw std::invalid_argument("a grid has at least one block");
  if (shared_bytes < 0 || shared_bytes % int64_t(sizeof(float)) != 0) {
    throw std::invalid_argument("dynamic shared memory is a whole number of floats, not " +
                                std::to_string(shared_bytes) + " bytes");
  }
  Counters counters;
  for (const std::string& n : names_) counters.global.push_back({n, 0, 0});
  std::mutex counters_mutex;

  for (int64_t blk = 0; blk < grid.count(); ++blk) {
    const dim3 idx(unsigned(blk % grid.x), unsigned(blk / grid.x % grid.y), unsigned(blk / (int64_t{grid.x} * grid.y)));
    detail::BlockState state(idx, block, shared_bytes / int64_t(sizeof(float)));
    const auto thread_main = [&](int64_t tid) {
      detail::ThreadContext ctx;
      ctx.block = &state;
      ctx.tid = tid;
      ctx.global_read.assign(names_.size(), 0);
      ctx.global_write.assign(names_.size(), 0);
      detail::this_thread = &ctx;
      threadIdx = state.thread_of(tid);
      blockIdx = idx;
      blockDim = block;
      gridDim = grid;
      try {
        body();
      } catch (const detail::Abort&) {
        // A finding stopped the launch; it is already recorded.
      } catch (...) {
        std::lock_guard lock(state.findings_mutex);
        if (!state.error) state.error = std::current_exception();
        state.cancelled.store(true);
      }
      // Leave the barrier, so that threads still waiting are released, not hung.
      state.arrivals[size_t(tid)] = detail::Arrival{ctx.phase, true, {}};
      state.barrier.arrive_and_drop();
      detail::this_thread = nullptr;
      std::lock_guard lock(counters_mutex);
      counters.smem_read_bytes += ctx.smem_read * int64_t(sizeof(float));
      counters.smem_write_bytes += ctx.smem_write * int64_t(sizeof(float));
      for (size_t t = 0; t < names_.size(); ++t) {
        counters.global[t].read_bytes += ctx.global_read[t] * int64_t(sizeof(float));
        counters.global[t].write_bytes += ctx.global_write[t] * int64_t(sizeof(float));
      }
    };
    std::vector<std::thread> threads;
    threads.reserve(size_t(block.count()));
    for (int64_t tid = 0; tid < block.count(); ++tid) threads.emplace_back(thread_main, tid);
    for (std::thread& t : threads) t.join();

    if (state.error) std::rethrow_exception(state.error);
    if (state.first) throw CheckFailed(*state.first, state.more);
    counters.barriers += state.barriers;
  }
  return counters;
}

}  // namespace step03::sim
