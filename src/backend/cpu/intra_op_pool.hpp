// SPDX-License-Identifier: Apache-2.0
#pragma once
// Intra-op parallelism of the CPU kernels: one op's work split over several threads, the GEMMs' blocks
// (kernels/gemm.cpp) and the element-wise loops alike. `set_intra_op_threads(n)` sets it process-wide, as
// OpenBLAS's thread count is (and sets OpenBLAS to one thread: each GEMM block is one single-threaded call):
// parallel_for then runs on the calling thread plus n - 1 helper threads.
//
// Why our own pool: the element-wise ops between the GEMMs (above all Adam, bound by its square root and
// division) otherwise run on one core while the BLAS's second thread waits, and Adam alone is a large share of
// a small-batch step (docs/benchmarks-history.md, "Training throughput against PyTorch", the intra-op pool).
//
// Contract of parallel_for(n, grain, body):
// - body(begin, end) runs for disjoint chunks [begin, end) covering [0, n) exactly once; chunk boundaries
//   are multiples of grain (the last chunk may be shorter), so a body that keeps 64-byte alignment per chunk
//   can rely on it. Each thread starts on its own contiguous share of the chunks (the caller on the first),
//   then takes what the others have left, so a loop over the same range runs mostly on the same threads from
//   one call to the next; which thread runs which chunk is still unspecified: bodies must be element-wise
//   independent, and then results are bitwise those of one thread.
// - Returns once every chunk has run. One chunk (n <= grain), one thread, or a pool busy with another
//   caller's loop (two devices' workers at once): the caller runs body(0, n) itself, so parallel_for never
//   waits for the pool and never deadlocks when called from inside a body. A body whose split must not depend
//   on the thread count (a GEMM's blocks) iterates over block indices instead of assuming one call per chunk.
// - body must not throw (the kernels' loops check their arguments before the loop).
// - Helpers pick up work within microseconds: after a loop they poll (yielding the core) for a while before
//   sleeping, as the device streams do; a helper that has not woken yet simply leaves its chunks to others.

#include <cstdint>

namespace tp::backend::cpu {

// Elements per chunk of a loop that streams through memory (ReLU, bias add, a sum): a chunk must be long
// against the cost of handing it to a helper thread (a wake-up, a cache line or two changing owner); a smaller
// loop runs on its caller.
inline constexpr std::int64_t kStreamingGrain = 32768;

// Rows per chunk of a row-wise loop over `cols` elements per row, at kStreamingGrain elements per chunk.
constexpr std::int64_t rows_per_chunk(std::int64_t cols) noexcept {
  return cols >= kStreamingGrain ? 1 : kStreamingGrain / (cols > 0 ? cols : 1);
}

// More intra-op threads than this is a typo, not a machine.
inline constexpr int kMaxIntraOpThreads = 1024;

// Threads the BLAS and parallel_for use (the caller included), process-wide: a device's
// KernelOptions::intra_op_threads sets it (kernel_settings.hpp). Throws tp::InvalidArgument for threads
// outside [1, kMaxIntraOpThreads].
void set_intra_op_threads(int threads);
[[nodiscard]] int intra_op_threads() noexcept;

namespace detail {
// Loops handed to the helper threads since the process started (a loop run entirely on its caller does not
// count): lets a test check that a kernel too small to split never wakes a helper.
[[nodiscard]] std::uint64_t loops_handed_to_helpers() noexcept;

using ChunkFunction = void (*)(const void* body, std::int64_t begin, std::int64_t end);
void parallel_for(std::int64_t n, std::int64_t grain, ChunkFunction function, const void* body);
using DoneFunction = bool (*)(const void* context);
bool lend_waiting_thread(DoneFunction done, const void* context);
}  // namespace detail

// Lends the calling thread, which is about to wait for a device's stream (a host thread waiting for a run), to
// the pool until done() holds: it takes the first helper's place, running that helper's share of each loop
// published meanwhile (the one in flight included), while that helper sleeps. The place stays held for a
// short grace after the thread leaves, so a host that waits for one run after another keeps it across the
// work it does in between; the first loop published after the grace wakes the helper again. So the loops
// of a step run on as many threads as the pool was sized for, instead of those plus a host thread polling or
// waking beside them, and the waiting host joins each loop at once.
// Returns false at once, lending nothing, with one intra-op thread, when done() already holds, or while
// another thread is lent. Otherwise returns true once done() holds, or once no loop has come for a poll
// budget (the stream waits on something else: the place goes back to the helper, and the caller sleeps as
// it would have). done() must not throw; the caller still waits for its event itself afterwards.
template <typename Done>
bool lend_waiting_thread(const Done& done) {
  return detail::lend_waiting_thread([](const void* erased) { return (*static_cast<const Done*>(erased))(); }, &done);
}

template <typename Body>
void parallel_for(std::int64_t n, std::int64_t grain, const Body& body) {
  detail::parallel_for(
      n, grain,
      [](const void* erased, std::int64_t begin, std::int64_t end) { (*static_cast<const Body*>(erased))(begin, end); },
      &body);
}

}  // namespace tp::backend::cpu
