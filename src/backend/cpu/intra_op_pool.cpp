// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/intra_op_pool.hpp"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "device/poll_before_sleeping.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cpu {
namespace {

// The caller's floating-point environment (flush-to-zero, denormals-are-zero, rounding: a stream task runs
// under ScopedFlushDenormals) applies to every chunk, whichever thread runs it; otherwise a chunk run by a
// helper could round differently from the same chunk run by the caller.
class FloatEnvironment {
 public:
#if defined(__SSE__)
  static FloatEnvironment current() noexcept { return FloatEnvironment(_mm_getcsr()); }
  class Scope {
   public:
    explicit Scope(FloatEnvironment environment) noexcept : saved_(_mm_getcsr()) { _mm_setcsr(environment.csr_); }
    ~Scope() { _mm_setcsr(saved_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    unsigned saved_;
  };

 private:
  explicit FloatEnvironment(unsigned csr) noexcept : csr_(csr) {}
  unsigned csr_;
#else
  static FloatEnvironment current() noexcept { return {}; }
  struct Scope {
    explicit Scope(FloatEnvironment) noexcept {}
  };
#endif
};

// The chunks [next, end) of one thread's share of a loop that nobody has claimed yet. Padded to a cache line:
// the owner and a thief claim from it at once.
struct alignas(64) ChunkRange {
  std::atomic<std::int64_t> next{0};
  std::int64_t end = 0;

  // The next unclaimed chunk of the range, or -1 when none is left (next then only grows past end).
  std::int64_t claim() noexcept {
    const std::int64_t chunk = next.fetch_add(1, std::memory_order_relaxed);
    return chunk < end ? chunk : -1;
  }
};

// One parallel_for in flight. Lives on the caller's stack; the caller returns only once every helper that
// joined has left (helpers_inside == 0), and no helper joins after the caller has unpublished it.
//
// The chunks are dealt out as `ways` contiguous shares, one per thread of the pool (the caller's is the first,
// helper h's the (h + 1)-th); a thread runs its own share first, in order, then takes what is left of the
// others'. A loop over the same range therefore runs mostly on the same threads from one call to the next (a
// GEMM block and the update of the weights it wrote, this step's update and the next's): each thread's
// chunks stay in its own core's caches, where handing chunks out first-come-first-served moved data between
// the cores at every loop. A thread that is late, or never comes, leaves its share to the others.
struct Loop {
  detail::ChunkFunction function;
  const void* body;
  std::int64_t n;
  std::int64_t grain;
  std::span<ChunkRange> shares;  // the pool's, one per thread, set up for this loop
  FloatEnvironment environment;
  std::atomic<int> helpers_inside{0};

  // Runs share `home`'s chunks, then the other shares' in turn, until no chunk is left unclaimed.
  void run_chunks(std::size_t home) {
    for (std::size_t offset = 0; offset < shares.size(); ++offset) {
      ChunkRange& share = shares[(home + offset) % shares.size()];
      for (std::int64_t chunk = share.claim(); chunk >= 0; chunk = share.claim()) {
        const std::int64_t begin = chunk * grain;
        function(body, begin, std::min(n, begin + grain));
      }
    }
  }
};

class Pool {
 public:
  // Never destroyed: a device's worker thread may still run a kernel while statics are destroyed at exit.
  static Pool& instance() {
    static Pool* const pool = new Pool;
    return *pool;
  }

  int threads() const noexcept { return threads_.load(std::memory_order_relaxed); }

  void resize(int threads) {
    acquire();  // no loop in flight while helpers come and go
    if (threads != this->threads()) {
      stop_helpers();
      threads_.store(threads, std::memory_order_relaxed);
      // The generation is read here, not by the new thread: a loop published before that thread first runs
      // must still count as new to it.
      const std::uint64_t seen = generation_.load(std::memory_order_relaxed);
      shares_ = std::make_unique<ChunkRange[]>(static_cast<std::size_t>(threads));
      for (int helper = 1; helper < threads; ++helper) {
        helpers_.emplace_back([this, seen, helper] { serve(seen, static_cast<std::size_t>(helper)); });
      }
    }
    release();
  }

  // False when another caller's loop holds the pool (or the caller is inside a body of its own loop).
  bool try_acquire() noexcept { return !busy_.exchange(true, std::memory_order_acquire); }
  void release() noexcept { busy_.store(false, std::memory_order_release); }

  std::uint64_t loops_handed() const noexcept { return loops_handed_.load(std::memory_order_relaxed); }

  // Deals `chunks` chunks out as one contiguous share per thread; the caller holds the pool (busy_), so no
  // other loop uses the shares, and no helper of an earlier loop is still inside one.
  std::span<ChunkRange> deal(std::int64_t chunks) noexcept {
    const auto ways = static_cast<std::int64_t>(threads());
    const std::span<ChunkRange> shares(shares_.get(), static_cast<std::size_t>(ways));
    // Shares of chunks / ways chunks, the first chunks % ways of them one more.
    const std::int64_t size = chunks / ways;
    const std::int64_t longer = chunks % ways;
    for (std::int64_t way = 0; way < ways; ++way) {
      ChunkRange& share = shares[static_cast<std::size_t>(way)];
      share.next.store(way * size + std::min(way, longer), std::memory_order_relaxed);
      share.end = (way + 1) * size + std::min(way + 1, longer);
    }
    return shares;  // published to the helpers by run()'s mutex
  }

  void run(Loop& loop) {
    loops_handed_.fetch_add(1, std::memory_order_relaxed);
    bool unpark = false;
    {
      std::lock_guard lock(mutex_);
      loop_ = &loop;
      generation_.fetch_add(1, std::memory_order_release);
      // A guest away for longer than its grace gives helper 1 its place back, with this loop.
      if (guest_.load(std::memory_order_relaxed) && !guest_inside_ &&
          std::chrono::steady_clock::now() - guest_left_ >= kGuestGrace) {
        guest_.store(false, std::memory_order_relaxed);
        unpark = true;
      }
    }
    wake_.notify_all();
    if (unpark) unpark_.notify_all();
    loop.run_chunks(0);
    {
      std::lock_guard lock(mutex_);
      loop_ = nullptr;
    }
    while (loop.helpers_inside.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }

  // The calling thread takes helper 1's place until done() (see lend_waiting_thread).
  bool lend(detail::DoneFunction done, const void* context) {
    if (threads() < 2 || done(context)) return false;
    {
      std::lock_guard lock(mutex_);
      if (guest_inside_) return false;
      guest_inside_ = true;
      guest_.store(true, std::memory_order_relaxed);
    }
    // Joins the loop in flight too: helper 1 may have parked before joining it.
    std::uint64_t seen = generation_.load(std::memory_order_acquire) - 1;
    auto idle_since = std::chrono::steady_clock::now();
    bool idle = false;
    for (;;) {
      if (generation_.load(std::memory_order_acquire) != seen) {
        Loop* loop = nullptr;
        {
          std::lock_guard lock(mutex_);
          loop = enter_loop(seen);
        }
        if (loop != nullptr) join(*loop, 1);
        idle_since = std::chrono::steady_clock::now();
        continue;
      }
      if (done(context)) break;
      std::this_thread::yield();
      if (std::chrono::steady_clock::now() - idle_since >= device::detail::kPollBudget) {
        idle = true;
        break;
      }
    }
    {
      std::lock_guard lock(mutex_);
      guest_inside_ = false;
      guest_left_ = std::chrono::steady_clock::now();
      // A guest with nothing to do goes to sleep: helper 1 takes its place back now.
      if (idle) guest_.store(false, std::memory_order_relaxed);
    }
    if (idle) unpark_.notify_all();
    return true;
  }

 private:
  Pool() = default;

  void acquire() noexcept {
    while (!try_acquire()) std::this_thread::yield();
  }

  void stop_helpers() {
    {
      std::lock_guard lock(mutex_);
      stopping_.store(true, std::memory_order_relaxed);
    }
    wake_.notify_all();
    unpark_.notify_all();
    for (std::thread& helper : helpers_) helper.join();
    helpers_.clear();
    stopping_.store(false, std::memory_order_relaxed);
  }

  // Helper 1 stands down while a guest (a waiting host thread) takes its place.
  bool parked(std::size_t home) const noexcept { return home == 1 && guest_.load(std::memory_order_relaxed); }

  // Helper `home` (1 .. threads - 1) of the pool: runs its own share of each loop first.
  void serve(std::uint64_t seen, std::size_t home) {
    for (;;) {
      device::detail::poll_before_sleeping([&] {
        return generation_.load(std::memory_order_acquire) != seen || stopping_.load(std::memory_order_relaxed) ||
               parked(home);
      });
      Loop* loop = nullptr;
      {
        std::unique_lock lock(mutex_);
        if (parked(home) && !stopping_.load(std::memory_order_relaxed)) {
          // Asleep on a condition run() never signals, so the guest's loops wake nobody; back to polling after.
          unpark_.wait(lock, [&] { return !parked(home) || stopping_.load(std::memory_order_relaxed); });
          continue;
        }
        wake_.wait(lock, [&] {
          return stopping_.load(std::memory_order_relaxed) || generation_.load(std::memory_order_relaxed) != seen ||
                 parked(home);
        });
        if (stopping_.load(std::memory_order_relaxed)) return;
        if (parked(home)) continue;  // a guest came while this helper slept
        loop = enter_loop(seen);
        if (loop == nullptr) continue;  // that loop finished before this helper woke
      }
      join(*loop, home);
    }
  }

  // The loop in flight, counted in its helpers_inside for the caller, or null; `seen` becomes the generation
  // that published it. The caller holds mutex_.
  Loop* enter_loop(std::uint64_t& seen) noexcept {
    seen = generation_.load(std::memory_order_relaxed);
    if (loop_ != nullptr) loop_->helpers_inside.fetch_add(1, std::memory_order_relaxed);
    return loop_;
  }

  // Runs `loop`'s chunks from share `home` on, then leaves it (helpers_inside was counted for this thread).
  static void join(Loop& loop, std::size_t home) {
    {
      const FloatEnvironment::Scope environment(loop.environment);
      loop.run_chunks(home);
    }
    loop.helpers_inside.fetch_sub(1, std::memory_order_release);
  }

  std::atomic<bool> busy_{false};  // a loop is in flight, or the helpers are being replaced
  std::atomic<int> threads_{1};
  std::vector<std::thread> helpers_;  // threads_ - 1 of them; changed only while busy_ is held
  // threads_ of them, one per thread: the loop in flight's shares (deal()); replaced only while busy_ is held
  std::unique_ptr<ChunkRange[]> shares_ = std::make_unique<ChunkRange[]>(1);
  std::mutex mutex_;  // guards loop_; generation_ and stopping_ change under it
  std::condition_variable wake_;
  std::condition_variable unpark_;  // helper 1 waits on it while a guest holds its place
  Loop* loop_ = nullptr;
  // Incremented for every published loop; atomic so that an idle helper polls it without the mutex.
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
  // A thread lent by lend() holds helper 1's place; written under mutex_, read by helper 1 without it. The
  // place stays held for kGuestGrace after the guest leaves: a host thread that waits for one run after another
  // is back within it, and the loops between run on the other threads instead of waking helper 1 each time.
  std::atomic<bool> guest_{false};
  bool guest_inside_ = false;                         // under mutex_: the guest is in lend()
  std::chrono::steady_clock::time_point guest_left_;  // under mutex_: when it last left
  static constexpr std::chrono::microseconds kGuestGrace{200};
  std::atomic<std::uint64_t> loops_handed_{0};  // loops run() published; statistics only
};

}  // namespace

void set_intra_op_threads(int threads) {
  if (threads < 1 || threads > kMaxIntraOpThreads) {
    TP_THROW(InvalidArgument, "intra_op_threads", "threads = ", threads, " must be in [1, ", kMaxIntraOpThreads,
             "] (1: every kernel on its calling thread)");
  }
  // The GEMMs are split over the pool's threads (kernels/gemm.cpp), one BLAS call on one thread per block.
  openblas_set_num_threads(1);
  Pool::instance().resize(threads);
}

int intra_op_threads() noexcept { return Pool::instance().threads(); }

namespace detail {

std::uint64_t loops_handed_to_helpers() noexcept { return Pool::instance().loops_handed(); }

bool lend_waiting_thread(DoneFunction done, const void* context) { return Pool::instance().lend(done, context); }

void parallel_for(std::int64_t n, std::int64_t grain, ChunkFunction function, const void* body) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  Pool& pool = Pool::instance();
  if (pool.threads() < 2 || n <= grain || !pool.try_acquire()) {
    function(body, 0, n);
    return;
  }
  Loop loop{.function = function,
            .body = body,
            .n = n,
            .grain = grain,
            .shares = pool.deal(n / grain + (n % grain != 0 ? 1 : 0)),
            .environment = FloatEnvironment::current()};
  pool.run(loop);
  pool.release();
}

}  // namespace detail
}  // namespace tp::backend::cpu
