/// \file step03_simulated_threads/simulator.cpp
/// \brief The simulator's machinery: blocks of OS threads, barriers and warp shuffles, the shadow of shared memory.
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
///  - Barriers and shuffles are one piece of bookkeeping under one mutex per
///    block. Each thread notes where it waits (a barrier's or a shuffle's source
///    line) or that it left the kernel. A barrier completes once every thread
///    still in the kernel waits at it, a shuffle once every lane of the warp
///    still in the kernel does; the completion compares the notes, so threads
///    at different lines, or a thread that left in the meantime, is divergence.
///    When every thread still in the kernel waits and nothing can complete (some
///    at a barrier, lanes of their warp at a shuffle), that is reported too:
///    divergence is reported, never a hang.
///  - A pointer (Ptr) carries the array it points into (detail::Array): a
///    global tensor, the block's whole shared memory, or a shared array named
///    with sim::name(). An access is bounds-checked against that array; the
///    names of one block are kept in one list, where a new name is checked
///    against the others for overlap.
///  - A shuffle's values pass through per-warp slots under that mutex, not
///    through shared memory: a shuffle is not a race, and not a barrier either.
///  - A finding stops the launch: the thread that made it ends, the others end
///    at their next access, barrier or shuffle, and `launch` throws the first
///    finding.
#include "simulator.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "common/progress.hpp"
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
    : std::runtime_error(
          first.message +
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

std::vector<std::pair<std::string, double>> Counters::named() const {
  std::vector<std::pair<std::string, double>> v;
  for (const Tensor& t : global) {  // the directions a tensor is moved in
    if (t.read_bytes > 0) v.push_back({t.name + "_read_bytes", double(t.read_bytes)});
    if (t.write_bytes > 0) v.push_back({t.name + "_write_bytes", double(t.write_bytes)});
  }
  v.insert(v.end(), {{"smem_read_bytes", double(smem_read_bytes)},
                     {"smem_write_bytes", double(smem_write_bytes)},
                     {"barriers", double(barriers)},
                     {"shuffles", double(shuffles)}});
  return v;
}

namespace detail {

namespace {

/// A shadow word: (phase + 1) in the high 32 bits, so 0 means "never"; the
/// thread in the low 32 bits.
constexpr uint64_t kThreadMask = 0xffffffffu;
/// The shadow word of an access by thread `tid` in barrier phase `phase`.
uint64_t shadow(int64_t phase, int64_t tid) { return (uint64_t(phase + 1) << 32) | uint64_t(tid); }
/// The barrier phase of shadow word `w` (-1: never accessed).
int64_t shadow_phase(uint64_t w) { return int64_t(w >> 32) - 1; }
/// The thread of shadow word `w`.
int64_t shadow_thread(uint64_t w) { return int64_t(w & kThreadMask); }

/// "attention.cpp:123": a barrier's or shuffle's file (without its directory) and line.
std::string file_and_line(const std::source_location& site) {
  const char* file = site.file_name();
  if (const char* slash = std::strrchr(file, '/')) file = slash + 1;
  return std::string(file) + ":" + std::to_string(site.line());
}

/// What a thread is doing, as the barrier and shuffle bookkeeping sees it.
enum class Where {
  running,  ///< between barriers and shuffles
  barrier,  ///< waiting at a block barrier (__syncthreads)
  shuffle,  ///< waiting at a warp shuffle (__shfl_xor_sync)
  left,  ///< left the kernel
};

/// Where a thread stands: running, waiting at a source line, or gone.
struct Arrival {
  Where where = Where::running;  ///< what it is doing
  std::source_location site{};  ///< the barrier's or shuffle's source line, while it waits there
  int64_t phase = 0;  ///< when it left: the block's barrier phase then
  int64_t round = 0;  ///< when it left: its warp's shuffles completed then
};

/// How many times a thread waiting at a barrier or shuffle yields before it sleeps.
constexpr int kYields = 8;

/// Whether two barrier or shuffle sites are the same line of the same file.
bool same_site(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && std::strcmp(a.file_name(), b.file_name()) == 0;
}

}  // namespace

/// One warp of a block: its lanes and the slots through which a shuffle exchanges values.
struct WarpState {
  int64_t first = 0;  ///< the block-linear id of lane 0
  int64_t size = 0;  ///< lanes at launch (32, or fewer in a partial last warp)
  int64_t lanes = 0;  ///< lanes still in the kernel
  int64_t arrived = 0;  ///< lanes waiting at the current shuffle
  int64_t round = 0;  ///< shuffles completed
  std::array<float, warpSize> value{};  ///< each lane's value in the current shuffle
  std::array<int, warpSize> source{};  ///< the lane each lane reads from in it
  std::array<float, warpSize> result{};  ///< what each lane receives, once it completes
  /// Bumped (and waited on, outside the mutex) when a shuffle completes or the launch stops.
  std::atomic<int64_t> released{0};
};

/// One block being run: its shared memory with shadow, its barrier and warps, its findings.
///
/// Barriers and shuffles are one piece of bookkeeping under `sync_mutex`: a
/// thread that arrives notes where it waits, then `settle` completes whatever
/// can complete (a barrier once all threads still in the kernel wait at it, a
/// shuffle once all lanes of the warp still in it do). If every thread still in
/// the kernel then waits and none of them can be released — some at a barrier,
/// others of a warp at a shuffle — that is divergence: reported, never a hang.
struct BlockState {
  /// The state of block `idx_` of `dim_`-sized blocks with `arena_floats` of shared memory.
  BlockState(dim3 idx_, dim3 dim_, int64_t arena_floats)
      : idx(idx_),
        dim(dim_),
        threads(dim_.count()),
        arena(static_cast<size_t>(arena_floats)),
        written(new std::atomic<uint64_t>[static_cast<size_t>(arena_floats)]()),
        read(new std::atomic<uint64_t>[static_cast<size_t>(arena_floats)]()),
        read2(new std::atomic<uint64_t>[static_cast<size_t>(arena_floats)]()),
        warp_count((threads + warpSize - 1) / warpSize),
        warps(new WarpState[static_cast<size_t>(warp_count)]),
        arrivals(static_cast<size_t>(threads)),
        live(threads) {
    smem.name = "smem";
    smem.shared = true;
    smem.size = arena_floats;
    for (int64_t w = 0; w < warp_count; ++w) {
      warps[w].first = w * warpSize;
      warps[w].size = warps[w].lanes = std::min<int64_t>(warpSize, threads - w * warpSize);
    }
  }

  /// The (x, y, z) index of the thread with block-linear id `tid`.
  dim3 thread_of(int64_t tid) const {
    return dim3(unsigned(tid % dim.x), unsigned(tid / dim.x % dim.y), unsigned(tid / (int64_t{dim.x} * dim.y)));
  }
  /// "(x,y,z)" of thread `tid`, as the reports print it.
  std::string thread_name(int64_t tid) const { return to_string(thread_of(tid)); }
  /// The warp of thread `tid`.
  WarpState& warp_of(int64_t tid) { return warps[tid / warpSize]; }

  /// "barrier phase 7 (after the barrier at attention.cpp:210)".
  static std::string phase_name(int64_t phase, const std::source_location& last) {
    if (phase == 0) return "barrier phase 0 (before the first barrier)";
    return "barrier phase " + std::to_string(phase) + " (after the barrier at " + file_and_line(last) + ")";
  }

  /// Records a finding (the first one is kept) and stops the launch. Threads
  /// waiting at a barrier or shuffle are woken by the next `settle`, which the
  /// finding thread's exit (or the caller, inside `settle`) runs.
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

  /// Thread `tid` waits at the block barrier at `site` until all threads still
  /// in the kernel have arrived. Throws Abort when the launch stops.
  void wait_at_barrier(int64_t tid, const std::source_location& site) {
    std::unique_lock lock(sync_mutex);
    if (cancelled.load()) throw Abort{};
    arrivals[size_t(tid)] = Arrival{Where::barrier, site, 0, 0};
    ++at_barrier;
    ++waiting;
    const int64_t seen = barrier_released.load();
    settle();
    lock.unlock();
    wait_for_change(barrier_released, seen);
    if (cancelled.load()) throw Abort{};
  }

  /// Thread `tid` offers `value` at the shuffle at `site` and receives lane
  /// `source`'s, once all lanes of its warp still in the kernel have arrived.
  float wait_at_shuffle(int64_t tid, float value, int source, const std::source_location& site) {
    std::unique_lock lock(sync_mutex);
    if (cancelled.load()) throw Abort{};
    WarpState& w = warp_of(tid);
    const size_t lane = size_t(tid - w.first);
    arrivals[size_t(tid)] = Arrival{Where::shuffle, site, 0, 0};
    w.value[lane] = value;
    w.source[lane] = source;
    ++w.arrived;
    ++waiting;
    const int64_t seen = w.released.load();
    settle();
    lock.unlock();
    wait_for_change(w.released, seen);
    if (cancelled.load()) throw Abort{};
    // Read before this lane arrives at the next shuffle, which alone could complete it and overwrite the slot.
    return w.result[lane];
  }

  /// Waits until `released` is no longer `seen`: the barrier or shuffle completed, or
  /// the launch stopped. Waiting outside the mutex lets the woken threads run at once;
  /// yielding a few times first lets the other lanes of a warp (often only
  /// microseconds behind) arrive without a sleep and a wake-up in the kernel.
  /// (kYields = 8 measured fastest of 0, 8, 32, 128 for 64 threads on 2 cores.)
  static void wait_for_change(const std::atomic<int64_t>& released, int64_t seen) {
    for (int spin = 0; spin < kYields && released.load() == seen; ++spin) std::this_thread::yield();
    for (int64_t r = released.load(); r == seen; r = released.load()) released.wait(seen);
  }

  /// Releases a barrier or shuffle's waiting threads.
  static void release(std::atomic<int64_t>& released) {
    released.fetch_add(1);
    released.notify_all();
  }

  /// Thread `tid` leaves the kernel: threads waiting for it are released, and
  /// the barrier or shuffle they wait at reports it.
  void leave(int64_t tid) {
    std::lock_guard lock(sync_mutex);
    WarpState& w = warp_of(tid);
    arrivals[size_t(tid)] = Arrival{Where::left, {}, phase, w.round};
    --live;
    --w.lanes;
    settle();
  }

  /// Completes what can complete after an arrival or a departure, and reports
  /// a block where every thread waits and none can be released. Runs under
  /// `sync_mutex`.
  void settle() {
    for (int64_t w = 0; w < warp_count && !cancelled.load(); ++w) {
      if (warps[w].arrived > 0 && warps[w].arrived == warps[w].lanes) complete_shuffle(warps[w]);
    }
    if (!cancelled.load() && at_barrier > 0 && at_barrier == live) complete_barrier();
    if (!cancelled.load() && live > 0 && waiting == live) report_deadlock();
    if (cancelled.load()) {  // a stopped launch: every waiting thread wakes and ends
      release(barrier_released);
      for (int64_t w = 0; w < warp_count; ++w) release(warps[w].released);
    }
  }

  /// Threads grouped by the source line they wait at, in order of first appearance.
  using Groups = std::vector<std::pair<std::source_location, std::vector<int64_t>>>;

  /// Adds thread `t`, waiting at `site`, to its group.
  static void add_to_group(Groups& groups, const std::source_location& site, int64_t t) {
    auto same = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return same_site(g.first, site); });
    if (same == groups.end()) {
      groups.push_back({site, {t}});
    } else {
      same->second.push_back(t);
    }
  }

  /// "(0,0,0), (1,0,0), (2,0,0), (3,0,0) and 4 more".
  std::string list(const std::vector<int64_t>& ts) const {
    std::string s;
    const size_t shown = std::min<size_t>(ts.size(), 4);
    for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + thread_name(ts[i]);
    if (ts.size() > shown) s += " and " + std::to_string(ts.size() - shown) + " more";
    return s;
  }

  /// Reports barrier divergence: `title`, then who waits where and who left.
  void report_divergence(const std::string& title, const Groups& at_barrier_sites, const Groups& at_shuffle_sites,
                         const std::vector<int64_t>& left) {
    Finding f;
    f.check = Check::barrier_divergence;
    f.phase = phase;
    std::ostringstream m;
    m << to_string(Check::barrier_divergence) << ": " << title << "\n";
    for (const auto& [site, ts] : at_barrier_sites) {
      m << "  threads " << list(ts) << " wait at the barrier at " << file_and_line(site) << "\n";
      f.threads.push_back(thread_name(ts.front()));
    }
    for (const auto& [site, ts] : at_shuffle_sites) {
      m << "  threads " << list(ts) << " wait at the shuffle at " << file_and_line(site) << "\n";
      f.threads.push_back(thread_name(ts.front()));
    }
    if (!left.empty()) {
      m << "  threads " << list(left) << " have left the kernel\n";
      f.threads.push_back(thread_name(left.front()));
    }
    m << "  barrier phase " << phase << ": each of them had passed " << phase << " barrier(s)";
    f.message = m.str();
    report(std::move(f));
  }

  /// All threads still in the kernel wait at a barrier: release them, or
  /// report that they wait at different ones or that some left in this phase.
  void complete_barrier() {
    Groups sites;
    std::vector<int64_t> left;
    for (int64_t t = 0; t < threads; ++t) {
      Arrival& a = arrivals[size_t(t)];
      if (a.where == Where::barrier) {
        add_to_group(sites, a.site, t);
        a.where = Where::running;
      } else if (a.where == Where::left && a.phase == phase) {
        left.push_back(t);
      }
    }
    if (sites.size() == 1 && left.empty()) {
      ++barriers;
    } else {
      report_divergence("the threads of block " + to_string(idx) + " did not all reach the same barrier", sites, {},
                        left);
    }
    ++phase;
    waiting -= at_barrier;
    at_barrier = 0;
    release(barrier_released);
  }

  /// All lanes of `w` still in the kernel wait at a shuffle: exchange the
  /// values and release them, or report that they wait at different shuffles
  /// or that a lane left since the warp's last shuffle.
  void complete_shuffle(WarpState& w) {
    Groups sites;
    std::vector<int64_t> left;
    for (int64_t t = w.first; t < w.first + w.size; ++t) {
      Arrival& a = arrivals[size_t(t)];
      if (a.where == Where::shuffle) {
        add_to_group(sites, a.site, t);
        a.where = Where::running;
      } else if (a.where == Where::left && a.round == w.round) {
        left.push_back(t);
      }
    }
    if (sites.size() == 1 && left.empty()) {
      for (int64_t lane = 0; lane < w.size; ++lane) w.result[size_t(lane)] = w.value[size_t(w.source[size_t(lane)])];
      ++shuffles;
    } else {
      report_divergence("the threads of warp " + std::to_string(w.first / warpSize) + " of block " + to_string(idx) +
                            " did not all reach the same shuffle",
                        {}, sites, left);
    }
    ++w.round;
    waiting -= w.arrived;
    w.arrived = 0;
    release(w.released);
  }

  /// Every thread still in the kernel waits, none can be released: some wait
  /// at a barrier while lanes of their warps wait at a shuffle (or the reverse).
  void report_deadlock() {
    Groups barrier_sites, shuffle_sites;
    for (int64_t t = 0; t < threads; ++t) {
      const Arrival& a = arrivals[size_t(t)];
      if (a.where == Where::barrier) add_to_group(barrier_sites, a.site, t);
      if (a.where == Where::shuffle) add_to_group(shuffle_sites, a.site, t);
    }
    report_divergence("the threads of block " + to_string(idx) +
                          " wait for each other at a barrier and at warp shuffles, which none of them can pass",
                      barrier_sites, shuffle_sites, {});
  }

  dim3 idx;  ///< the block's index in the grid
  dim3 dim;  ///< the block's extents
  int64_t threads;  ///< threads in the block
  /// The block's shared memory, counted as working memory.
  common::Workspace<std::atomic<float>> arena;
  /// The shadow (simulator bookkeeping) of each float of `arena`: its last write
  /// (writer and barrier phase), so that a read or write by another thread in the
  /// same phase is a race.
  std::unique_ptr<std::atomic<uint64_t>[]> written;
  /// The first reader of each float of `arena` in the current phase.
  std::unique_ptr<std::atomic<uint64_t>[]> read;
  /// A second, different reader of each float in the same phase (so that a later
  /// write by either reader is still seen as racing with the other).
  std::unique_ptr<std::atomic<uint64_t>[]> read2;
  /// The whole of `arena`, as dynamic_shared() points to it.
  Array smem;
  std::mutex names_mutex;  ///< guards `named`
  /// The shared arrays named so far (a deque: pointers point at them).
  std::deque<Array> named;

  common::Progress* progress = nullptr;  ///< the launch's progress bar, moved by thread 0's barriers
  int64_t progress_before = 0;  ///< its units done before this block
  int64_t progress_barriers = 0;  ///< the barriers a block is expected to pass

  int64_t warp_count;  ///< warps in the block (the last one may be partial)
  std::unique_ptr<WarpState[]> warps;  ///< the warps
  std::mutex sync_mutex;  ///< guards the members below, up to `shuffles`
  /// Bumped (and waited on, outside the mutex) when a barrier completes or the launch stops.
  std::atomic<int64_t> barrier_released{0};
  std::vector<Arrival> arrivals;  ///< where each thread stands
  int64_t live;  ///< threads still in the kernel
  int64_t waiting = 0;  ///< threads waiting at a barrier or a shuffle
  int64_t at_barrier = 0;  ///< threads waiting at the barrier
  int64_t phase = 0;  ///< barriers completed (the barrier phase)
  int64_t barriers = 0;  ///< barriers passed without divergence
  int64_t shuffles = 0;  ///< warp shuffles completed without divergence

  std::atomic<bool> cancelled{false};  ///< a finding or an error stopped the launch
  std::mutex findings_mutex;  ///< guards the members below
  std::optional<Finding> first;  ///< the first finding
  int64_t more = 0;  ///< findings after the first
  std::exception_ptr error;  ///< the first exception other than a finding
};

namespace {

/// The calling thread's block; a simulator call outside a kernel is a logic error.
BlockState& current_block() {
  if (this_thread == nullptr) throw std::logic_error("a simulator call outside a kernel");
  return *this_thread->block;
}

/// "[offset, offset + count)", as the reports print ranges of elements.
std::string range(int64_t offset, int64_t count) {
  std::ostringstream s;
  s << "[" << offset << ", " << offset + count << ")";
  return s.str();
}

/// Checks element `e` of shared array `array` and returns its float in the arena.
int64_t shared_element(BlockState& b, const Array& array, int64_t e) {
  if (b.cancelled.load(std::memory_order_relaxed)) throw Abort{};
  if (e < 0 || e >= array.size) {
    b.fail(Check::out_of_bounds, array.name, e, {},
           "shared " + array.name + "[" + std::to_string(e) + "] is outside " + array.name + "'s " +
               std::to_string(array.size) + " elements (shared floats " + range(array.first, array.size) + ")");
  }
  return array.first + e;
}

}  // namespace

float shared_load(const Array& array, int64_t e) {
  BlockState& b = current_block();
  ThreadContext& ctx = *this_thread;
  const int64_t a = shared_element(b, array, e);
  // Note this read first (as the first reader, or as a second, different one),
  // then look for a write by another thread in this phase.
  const uint64_t me = shadow(ctx.phase, ctx.tid);
  uint64_t r = b.read[a].load();
  while (shadow_phase(r) != ctx.phase && !b.read[a].compare_exchange_weak(r, me)) {}
  if (shadow_phase(r) == ctx.phase && shadow_thread(r) != ctx.tid) {
    uint64_t r2 = b.read2[a].load();
    while (shadow_phase(r2) != ctx.phase && !b.read2[a].compare_exchange_weak(r2, me)) {}
  }
  const uint64_t w = b.written[a].load();
  const auto element = [&] { return array.name + "[" + std::to_string(e) + "]"; };
  if (w == 0) {
    b.fail(Check::uninitialised_read, array.name, e, {},
           "shared " + element() + " is read, but no thread has written it since the launch");
  }
  if (shadow_phase(w) == ctx.phase && shadow_thread(w) != ctx.tid) {
    b.fail(Check::shared_race, array.name, e, {shadow_thread(w)},
           "shared " + element() + " is read by thread " + b.thread_name(ctx.tid) + " and written by thread " +
               b.thread_name(shadow_thread(w)) + " with no barrier between them");
  }
  ++ctx.smem_read;
  return b.arena[size_t(a)].load(std::memory_order_relaxed);
}

void shared_store(const Array& array, int64_t e, float value) {
  BlockState& b = current_block();
  ThreadContext& ctx = *this_thread;
  const int64_t a = shared_element(b, array, e);
  // Note this write first, then look for another thread's access in this phase.
  const uint64_t w = b.written[a].exchange(shadow(ctx.phase, ctx.tid));
  const auto element = [&] { return array.name + "[" + std::to_string(e) + "]"; };
  if (shadow_phase(w) == ctx.phase && shadow_thread(w) != ctx.tid) {
    b.fail(Check::shared_race, array.name, e, {shadow_thread(w)},
           "shared " + element() + " is written by thread " + b.thread_name(ctx.tid) + " and by thread " +
               b.thread_name(shadow_thread(w)) + " with no barrier between them");
  }
  for (const uint64_t r : {b.read[a].load(), b.read2[a].load()}) {
    if (shadow_phase(r) == ctx.phase && shadow_thread(r) != ctx.tid) {
      b.fail(Check::shared_race, array.name, e, {shadow_thread(r)},
             "shared " + element() + " is written by thread " + b.thread_name(ctx.tid) + " and read by thread " +
                 b.thread_name(shadow_thread(r)) + " with no barrier between them");
    }
  }
  ++ctx.smem_write;
  b.arena[size_t(a)].store(value, std::memory_order_relaxed);
}

void bad_access(const Array* array) {
  if (this_thread == nullptr) {
    throw std::logic_error(array ? "an access to " + array->name + " outside a kernel"
                                 : "an access through a null pointer outside a kernel");
  }
  current_block().fail(Check::out_of_bounds, "", -1, {}, "an access through a pointer that points nowhere");
}

void global_out_of_bounds(const Array& array, int64_t base, int64_t index) {
  const int64_t e = base + index;
  std::string what = "global " + array.name + "[" + std::to_string(e) + "] is " +
                     (e < 0 ? "before the start" : "past the end") + " of " + array.name + " (" +
                     std::to_string(array.size) + " elements)";
  if (base != 0) {
    what += ": index " + std::to_string(index) + " from a pointer to " + array.name + "[" + std::to_string(base) + "]";
  }
  current_block().fail(Check::out_of_bounds, array.name, e, {}, what);
}

}  // namespace detail

void name(std::initializer_list<Named> arrays) {
  for (const Named& a : arrays) name(a.p, a.name, a.count);
}

Ptr<float> dynamic_shared() { return Ptr<float>(&detail::current_block().smem, 0); }

void name(Ptr<float>& p, const char* name, int64_t count) {
  detail::BlockState& b = detail::current_block();
  if (p.array_ == nullptr || !p.array_->shared) {
    throw std::invalid_argument(std::string("sim::name(") + name + "): names arrays in shared memory only, not " +
                                (p.array_ ? "the global tensor " + p.array_->name : std::string("a null pointer")));
  }
  const int64_t first = p.array_->first + p.offset_, size = b.smem.size;
  if (first < 0 || count < 0 || first + count > size) {
    b.fail(Check::out_of_bounds, name, first + count - 1, {},
           "shared array " + std::string(name) + " " + detail::range(first, count) + " does not fit in the " +
               std::to_string(size) + "-float dynamic shared memory");
  }
  std::unique_lock lock(b.names_mutex);
  for (const detail::Array& v : b.named) {
    const bool same_name = v.name == name;
    if (same_name && v.first == first && v.size == count) {
      p = Ptr<float>(&v, 0);
      return;
    }
    const int64_t lo = std::max(v.first, first), hi = std::min(v.first + v.size, first + count);
    if (same_name || lo < hi) {
      lock.unlock();
      b.fail(Check::overlapping_buffers, name, lo - first, {},
             "shared array " + std::string(name) + " " + detail::range(first, count) +
                 (same_name ? " was named before as " : " overlaps ") + v.name + " " + detail::range(v.first, v.size) +
                 (same_name
                      ? ""
                      : " in shared floats " + detail::range(lo, hi - lo) + ": " + name + "[" +
                            std::to_string(lo - first) + "] is " + v.name + "[" + std::to_string(lo - v.first) + "]"));
    }
  }
  detail::Array& a = b.named.emplace_back();
  a.name = name;
  a.shared = true;
  a.first = first;
  a.size = count;
  p = Ptr<float>(&a, 0);
}

}  // namespace step03::sim

// CUDA's global functions (declared in simulator.hpp).
namespace detail = step03::sim::detail;

void __syncthreads(std::source_location site) {
  detail::BlockState& b = detail::current_block();
  detail::ThreadContext& ctx = *detail::this_thread;
  b.wait_at_barrier(ctx.tid, site);
  ++ctx.phase;
  ctx.last_barrier = site;
  if (ctx.tid == 0) b.progress->update(b.progress_before + std::min(ctx.phase, b.progress_barriers));
}

float __shfl_xor_sync(unsigned mask, float var, int laneMask, int width, std::source_location site) {
  detail::BlockState& b = detail::current_block();
  const detail::ThreadContext& ctx = *detail::this_thread;
  const detail::WarpState& w = b.warp_of(ctx.tid);
  const std::string where = "__shfl_xor_sync at " + detail::file_and_line(site);
  if (mask != 0xffffffffu) {
    throw std::invalid_argument(where + ": the simulator models whole-warp shuffles only (mask 0xffffffff), not mask " +
                                std::to_string(mask));
  }
  if (width != step03::sim::warpSize) {
    throw std::invalid_argument(where + ": the simulator models whole-warp shuffles only (width 32), not width " +
                                std::to_string(width));
  }
  if (laneMask < 0 || laneMask >= step03::sim::warpSize) {
    throw std::invalid_argument(where + ": lane mask " + std::to_string(laneMask) + " is outside [0, 32)");
  }
  if (w.size != step03::sim::warpSize) {
    throw std::invalid_argument(
        where + ": warp " + std::to_string(w.first / step03::sim::warpSize) + " of a block of " +
        std::to_string(b.threads) + " threads has " + std::to_string(w.size) +
        " lanes; the simulator shuffles whole warps only (a block of a multiple of 32 threads)");
  }
  const int lane = int(ctx.tid - w.first);
  return b.wait_at_shuffle(ctx.tid, var, lane ^ laneMask, site);
}

namespace step03::sim {

Ptr<const float> Device::global(const std::string& name, const std::vector<float>& data) {
  detail::Array& a = tensors_.emplace_back();
  a.name = name;
  a.size = int64_t(data.size());
  a.data = const_cast<float*>(data.data());  // only ever loaded: a Ptr<const float> has no stores
  a.tensor = int(tensors_.size()) - 1;
  return Ptr<const float>(&a, 0);
}

Ptr<float> Device::global(const std::string& name, float* data, int64_t count) {
  detail::Array& a = tensors_.emplace_back();
  a.name = name;
  a.size = count;
  a.data = data;
  a.tensor = int(tensors_.size()) - 1;
  return Ptr<float>(&a, 0);
}

void Device::show_progress(bool enabled, int64_t barriers_per_block) {
  progress_ = enabled;
  barriers_per_block_ = std::max<int64_t>(barriers_per_block, 0);
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
  for (const detail::Array& t : tensors_) counters.global.push_back({t.name, 0, 0});
  std::mutex counters_mutex;
  // Units of progress: per block, the barriers thread 0 passes, then the block's end.
  const int64_t per_block = barriers_per_block_ + 1;
  common::Progress progress(progress_, grid.count() * per_block);

  for (int64_t blk = 0; blk < grid.count(); ++blk) {
    const dim3 idx(unsigned(blk % grid.x), unsigned(blk / grid.x % grid.y), unsigned(blk / (int64_t{grid.x} * grid.y)));
    detail::BlockState state(idx, block, shared_bytes / int64_t(sizeof(float)));
    state.progress = &progress;
    state.progress_before = blk * per_block;
    state.progress_barriers = barriers_per_block_;
    const auto thread_main = [&](int64_t tid) {
      detail::ThreadContext ctx;
      ctx.block = &state;
      ctx.tid = tid;
      ctx.global_read.assign(tensors_.size(), 0);
      ctx.global_write.assign(tensors_.size(), 0);
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
      // Leave, so that threads still waiting for this one are released, not hung.
      state.leave(tid);
      detail::this_thread = nullptr;
      std::lock_guard lock(counters_mutex);
      counters.smem_read_bytes += ctx.smem_read * int64_t(sizeof(float));
      counters.smem_write_bytes += ctx.smem_write * int64_t(sizeof(float));
      for (size_t t = 0; t < tensors_.size(); ++t) {
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
    counters.shuffles += state.shuffles;
    progress.update((blk + 1) * per_block);
  }
  return counters;
}

}  // namespace step03::sim
