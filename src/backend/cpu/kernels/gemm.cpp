// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/gemm.hpp"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <thread>
#include <type_traits>
#include <vector>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernels/check.hpp"
#include "backend/cpu/kernels/gemm_auto.hpp"
#include "backend/cpu/kernels/isa_clones.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cpu {
namespace {

constexpr std::string_view kKernel = "matmul";

void check_blas_size(std::string_view name, std::int64_t value) {
  detail::check_size(kKernel, name, value);
  if (value > std::numeric_limits<int>::max()) {
    TP_THROW(InvalidArgument, detail::kComponent, kKernel, ": ", name, " = ", value, " exceeds the BLAS limit of ",
             std::numeric_limits<int>::max());
  }
}

// BLAS requires every leading dimension >= 1, even for an empty matrix.
int leading_dimension(std::int64_t columns) { return static_cast<int>(std::max<std::int64_t>(1, columns)); }

CBLAS_TRANSPOSE to_blas(Transpose transpose) { return transpose == Transpose::yes ? CblasTrans : CblasNoTrans; }

// Row-major operands with their leading dimensions; one BLAS call computes C (m x n) from them.
template <typename T>
struct Operands {
  Transpose transpose_a, transpose_b;
  const T* a;
  int lda;
  const T* b;
  int ldb;
  T* c;
  int ldc;
  T alpha, beta;
  GemmLibrary library = GemmLibrary::openblas;  // float32 only; never automatic (matmul resolves that first)

  void gemm(std::int64_t m, std::int64_t n, std::int64_t k) const {
    if constexpr (std::is_same_v<T, float>) {
      if (library == GemmLibrary::onednn) {
        onednn_sgemm(m, n, k);
        return;
      }
      cblas_sgemm(CblasRowMajor, to_blas(transpose_a), to_blas(transpose_b), static_cast<int>(m), static_cast<int>(n),
                  static_cast<int>(k), alpha, a, lda, b, ldb, beta, c, ldc);
    } else {
      static_assert(std::is_same_v<T, double>, "matmul is instantiated for float and double only");
      cblas_dgemm(CblasRowMajor, to_blas(transpose_a), to_blas(transpose_b), static_cast<int>(m), static_cast<int>(n),
                  static_cast<int>(k), alpha, a, lda, b, ldb, beta, c, ldc);
    }
  }

  // oneDNN's row-major sgemm on this thread alone: its OpenMP team size is the calling thread's, which
  // bf16_gemm sets to the intra-op thread count; the blocks are this code's split, not oneDNN's.
  void onednn_sgemm(std::int64_t m, std::int64_t n, std::int64_t k) const {
    omp_set_num_threads(1);
    const dnnl_status_t status =
        dnnl_sgemm(transpose_a == Transpose::yes ? 'T' : 'N', transpose_b == Transpose::yes ? 'T' : 'N', m, n, k, alpha,
                   a, lda, b, ldb, beta, c, ldc);
    if (status != dnnl_success) {
      TP_THROW(DeviceError, detail::kComponent, kKernel, ": oneDNN's dnnl_sgemm failed (status ",
               static_cast<int>(status), ") on ", m, " x ", n, " x ", k);
    }
  }

  // Rows [begin, end) of C: the matching rows of op(A), all of op(B).
  Operands rows(std::int64_t begin) const {
    Operands part = *this;
    part.a += transpose_a == Transpose::yes ? begin : begin * lda;
    part.c += begin * ldc;
    return part;
  }
  // Columns [begin, end) of C: all of op(A), the matching columns of op(B).
  Operands columns(std::int64_t begin) const {
    Operands part = *this;
    part.b += transpose_b == Transpose::yes ? begin * ldb : begin;
    part.c += begin;
    return part;
  }
  // Depth [begin, end) of the product: the matching columns of op(A) and rows of op(B), C as it is.
  Operands depth(std::int64_t begin) const {
    Operands part = *this;
    part.a += transpose_a == Transpose::yes ? begin * lda : begin;
    part.b += transpose_b == Transpose::yes ? begin : begin * ldb;
    return part;
  }
};

// The GEMM is split over the intra-op threads into blocks of C's rows (when m >= n) or columns, one BLAS call
// per block on one BLAS thread each (set_intra_op_threads leaves the BLAS single-threaded): OpenBLAS's own
// threads split both operands and synchronise inside the call, the blocks never do, so the split beats
// OpenBLAS's threading on the main job's GEMMs (bench/kernels/intra_op_bench.cpp; figures in
// docs/benchmarks-history.md, "Training throughput against PyTorch", the intra-op pool).
//
// Each block keeps at least kMinBlockWork multiply-adds: OpenBLAS computes small products (about 10^6
// multiply-adds or fewer) with other kernels, which sum in another order, so a product split into blocks below
// that size changes C's bits (128 x 10 x 784 does, in halves). Above it OpenBLAS's kernels for some CPUs (its
// SkylakeX ones) and oneDNN's sgemm sum every element in the same K order whatever the blocks, but not all of
// them: its Haswell kernels, which it also runs on CPUs it does not know, sum in an order that depends on the
// block's width. So the blocks follow the shape and the machine's CPU count (fixed for the process),
// never the intra-op thread count, which only decides how many blocks run at once (cpu_thread_count_test checks
// both libraries for 1 to 4 threads).
constexpr std::int64_t kMinBlockWork = std::int64_t{1} << 20;
// A product of kMinPairWork to kMinBlockWork multiply-adds (the main job's layer-2 GEMMs at batch 128: the
// skinny 128 x 10 x 512, 512 x 10 x 128 and 128 x 512 x 10) is always computed as two blocks, whatever the
// thread count (one thread runs both): its bits are those of the two blocks, never of the whole.
constexpr std::int64_t kMinPairWork = std::int64_t{1} << 18;
// Blocks of whole 16-row/column panels (the widest AVX-512 micro-kernel tile).
constexpr std::int64_t kBlockMultiple = 16;

std::int64_t round_up_to_panels(std::int64_t rows) {
  return (rows + kBlockMultiple - 1) / kBlockMultiple * kBlockMultiple;
}

std::atomic<std::int64_t> split_ways_for_testing{0};  // 0: the machine's (detail::set_split_ways_for_testing)

// The machine's online CPUs: the most blocks a product is split into. Not this process's affinity mask: ranks
// that mpirun binds to one core each must split a product as one process on all of them does, so that
// multi-worker and mirrored training agree bit for bit (multi_worker_cli_test checks it).
std::int64_t split_ways() noexcept {
  static const std::int64_t ways = std::clamp(static_cast<std::int64_t>(std::thread::hardware_concurrency()),
                                              std::int64_t{1}, static_cast<std::int64_t>(kMaxIntraOpThreads));
  const std::int64_t forced = split_ways_for_testing.load(std::memory_order_relaxed);
  return forced > 0 ? forced : ways;
}

// The block size (whole panels) splitting `extent` rows or columns, at `work_per_line` multiply-adds each, into
// at most `ways` blocks; 0: one call. The bits of C depend only on the shape and `ways`, never on the thread
// count (cpu_thread_count_test checks this, and fails with kMinBlockWork = 1).
std::int64_t block_size(std::int64_t extent, double work_per_line, std::int64_t ways) {
  const double work = static_cast<double>(extent) * work_per_line;
  if (work < static_cast<double>(kMinBlockWork)) {
    const bool pair = work >= static_cast<double>(kMinPairWork) && extent >= 2 * kBlockMultiple;
    return pair ? round_up_to_panels((extent + 1) / 2) : 0;
  }
  for (std::int64_t blocks = std::min<std::int64_t>(ways, extent / kBlockMultiple); blocks >= 2; --blocks) {
    const std::int64_t size = round_up_to_panels((extent + blocks - 1) / blocks);
    const std::int64_t last = extent - (extent - 1) / size * size;  // the shortest block
    if (size < extent && static_cast<double>(last) * work_per_line >= static_cast<double>(kMinBlockWork)) {
      return size;
    }
  }
  return 0;
}

// c[i] += partial[i]: the second depth half's product added to the first's.
template <typename T>
TP_ISA_CLONES void add_partial(T* __restrict__ c, const T* __restrict__ partial, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) c[i] += partial[i];
}

// Split-K: a product whose depth is at least twice its row count (a layer's forward product at a batch below
// half its input width, 128 x 512 x 784 in the main job) is computed as two products over the two halves of
// the depth, the first into C and the second into a scratch C, then added: C = (alpha op(A0) op(B0) + beta C) +
// alpha op(A1) op(B1). Each thread then reads only its half of the rows of op(B), a layer's weight, which the
// weight gradient (split by rows: x^T dy has the weight's shape and the batch as its depth) and the optimizer's
// update (by the flat element order) give to the same thread; split by columns instead, every step half of the
// weight the other thread has just updated moves between the cores, where the sum of the halves moves m x n
// elements. Where two vCPUs sit on cores without a shared cache that traffic costs several times as much
// (docs/benchmarks.md, "Why this VM runs in two speeds"). The halves are fixed by the shape and, with more
// than two CPUs, each half is split further by the row or column rule below into split_ways() / 2 blocks;
// only with an even split_ways(), so that no CPU is left without a block. The bits of C depend on the shape
// and split_ways(), never on the thread count. The scratch C is the calling thread's, kept for its next
// product up to kKeptScratchBytes; a larger one is given back after the product, so that one large product does
// not hold its scratch for the thread's life.
constexpr std::size_t kKeptScratchBytes = std::size_t{4} << 20;

template <typename T>
bool split_depth(const Operands<T>& operands, std::int64_t m, std::int64_t n, std::int64_t k) {
  if (!detail::splits_depth(m, n, k)) return false;
  const std::int64_t ways = split_ways();
  const std::int64_t half = round_up_to_panels((k + 1) / 2);
  const bool by_rows = m >= n;
  const std::int64_t extent = by_rows ? m : n;
  // The shorter (second) half decides, as the shortest block does in block_size.
  const double work_per_line = static_cast<double>(by_rows ? n : m) * static_cast<double>(k - half);
  std::int64_t size = block_size(extent, work_per_line, ways / 2);
  if (size == 0) size = extent;
  const std::int64_t blocks = (extent + size - 1) / size;  // per half
  thread_local std::vector<T> scratch;
  const auto elements = static_cast<std::size_t>(m * n);
  if (scratch.size() < elements) scratch.resize(elements);
  T* const partial = scratch.data();
  // Indexed by block, the first half's blocks first, so that a thread's contiguous share is one half's rows of
  // op(B) and a caller running everything itself still makes one call per block.
  parallel_for(2 * blocks, 1, [&](std::int64_t first_block, std::int64_t end_block) {
    for (std::int64_t block = first_block; block < end_block; ++block) {
      const bool second = block >= blocks;
      Operands<T> part = operands.depth(second ? half : 0);
      if (second) {
        part.c = partial;
        part.ldc = static_cast<int>(n);
        part.beta = T{0};
      }
      const std::int64_t depth = second ? k - half : half;
      const std::int64_t begin = (block % blocks) * size;
      const std::int64_t lines = std::min(extent, begin + size) - begin;
      if (by_rows) {
        part.rows(begin).gemm(lines, n, depth);
      } else {
        part.columns(begin).gemm(m, lines, depth);
      }
    }
  });
  T* const c = operands.c;  // contiguous: ldc == n
  parallel_for(m, rows_per_chunk(n), [&](std::int64_t begin, std::int64_t end) {
    add_partial(c + begin * n, partial + begin * n, (end - begin) * n);
  });
  if (scratch.size() * sizeof(T) > kKeptScratchBytes) std::vector<T>().swap(scratch);
  return true;
}

template <typename T>
void split_gemm(const Operands<T>& operands, std::int64_t m, std::int64_t n, std::int64_t k) {
  if (split_depth(operands, m, n, k)) return;
  const bool by_rows = m >= n;
  const std::int64_t extent = by_rows ? m : n;
  const double work_per_line = static_cast<double>(by_rows ? n : m) * static_cast<double>(k);
  const std::int64_t size = block_size(extent, work_per_line, split_ways());
  if (size == 0) {
    operands.gemm(m, n, k);
    return;
  }
  // Indexed by block, so that a caller running everything itself still makes one call per block.
  const std::int64_t blocks = (extent + size - 1) / size;
  parallel_for(blocks, 1, [&](std::int64_t first_block, std::int64_t end_block) {
    for (std::int64_t block = first_block; block < end_block; ++block) {
      const std::int64_t begin = block * size;
      const std::int64_t lines = std::min(extent, begin + size) - begin;
      if (by_rows) {
        operands.rows(begin).gemm(lines, n, k);
      } else {
        operands.columns(begin).gemm(m, lines, k);
      }
    }
  });
}

}  // namespace

void detail::set_split_ways_for_testing(std::int64_t ways) noexcept {
  split_ways_for_testing.store(std::clamp<std::int64_t>(ways, 0, kMaxIntraOpThreads), std::memory_order_relaxed);
}

bool detail::splits_depth(std::int64_t m, std::int64_t n, std::int64_t k) noexcept {
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  return split_ways() % 2 == 0 && k >= 2 * m && k >= 2 * kBlockMultiple &&
         work >= 2.0 * static_cast<double>(kMinBlockWork);
}

std::string_view name_of(GemmLibrary library) noexcept {
  switch (library) {
    case GemmLibrary::openblas: return "openblas";
    case GemmLibrary::onednn: return "onednn";
    case GemmLibrary::automatic: break;
  }
  return "auto";
}

GemmLibrary parse_gemm_library(std::string_view text, std::string_view what) {
  for (const GemmLibrary library : {GemmLibrary::automatic, GemmLibrary::openblas, GemmLibrary::onednn}) {
    if (text == name_of(library)) return library;
  }
  TP_THROW(InvalidArgument, detail::kComponent, what, " = '", text,
           "' is not a GEMM library; use 'auto' (the default: the faster one per shape, measured), 'openblas' "
           "or 'onednn'");
}

namespace {

std::atomic<bool> warmed_up{false};

}  // namespace

// oneDNN generates its sgemm kernels (one set per ISA, serving every shape) inside the first dnnl_sgemm of the
// process, under a std::call_once; one small product makes that call. It runs on the caller's thread, never a
// thread of its own: a process that exits while the generation runs would destroy oneDNN's statics under it.
void warm_up_gemm_library(GemmLibrary library) {
  if (library == GemmLibrary::openblas) return;
  static const bool generated = [] {
    constexpr std::int64_t kSide = 64;  // large enough for oneDNN's JIT driver rather than a small path
    const std::vector<float> a(kSide * kSide, 1.0F);
    std::vector<float> c(kSide * kSide);
    omp_set_num_threads(1);
    // A failure here is the real product's to report: it makes the same call with its own operands.
    static_cast<void>(
        dnnl_sgemm('N', 'N', kSide, kSide, kSide, 1.0F, a.data(), kSide, a.data(), kSide, 0.0F, c.data(), kSide));
    warmed_up.store(true, std::memory_order_release);
    return true;
  }();
  static_cast<void>(generated);
}

bool gemm_library_warmed_up() noexcept { return warmed_up.load(std::memory_order_acquire); }

template <typename T>
void matmul(Transpose transpose_a, Transpose transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
            const T* a, const T* b, T beta, T* c, GemmLibrary library) {
  check_blas_size("m", m);
  check_blas_size("n", n);
  check_blas_size("k", k);
  const std::int64_t c_size = detail::checked_product(kKernel, m, n);
  detail::check_pointer(kKernel, "a", a, detail::checked_product(kKernel, m, k));
  detail::check_pointer(kKernel, "b", b, detail::checked_product(kKernel, k, n));
  detail::check_pointer(kKernel, "c", c, c_size);
  if (c_size == 0) return;
  if (k == 0) {
    // Nothing to multiply: C = beta * C, with beta == 0 overwriting (BLAS semantics). Done here rather than
    // trusting every BLAS build's k == 0 path.
    if (beta == T{0}) {
      std::fill(c, c + c_size, T{0});
    } else {
      std::for_each(c, c + c_size, [beta](T& value) { value *= beta; });
    }
    return;
  }
  // Row-major storage: A is m x k (lda = k) or, transposed, k x m (lda = m); likewise B.
  const Operands<T> operands{.transpose_a = transpose_a,
                             .transpose_b = transpose_b,
                             .a = a,
                             .lda = leading_dimension(transpose_a == Transpose::yes ? m : k),
                             .b = b,
                             .ldb = leading_dimension(transpose_b == Transpose::yes ? k : n),
                             .c = c,
                             .ldc = leading_dimension(n),
                             .alpha = alpha,
                             .beta = beta,
                             .library = library};
  if constexpr (std::is_same_v<T, float>) {
    if (library == GemmLibrary::automatic) {
      Operands<T> chosen = operands;
      chosen.library =
          auto_gemm_library({.m = m, .n = n, .k = k, .transpose_a = transpose_a, .transpose_b = transpose_b},
                            [&operands](GemmLibrary candidate, std::int64_t rows, std::int64_t columns,
                                        std::int64_t depth, float* scratch) {
                              // The leading block of the caller's product into the scratch C, on this thread alone.
                              Operands<T> probe = operands;
                              probe.c = scratch;
                              probe.ldc = leading_dimension(columns);
                              probe.beta = 0.0F;
                              probe.library = candidate;
                              probe.gemm(rows, columns, depth);
                            });
      split_gemm(chosen, m, n, k);
      return;
    }
  }
  split_gemm(operands, m, n, k);
}

template void matmul<float>(Transpose, Transpose, std::int64_t, std::int64_t, std::int64_t, float, const float*,
                            const float*, float, float*, GemmLibrary);
template void matmul<double>(Transpose, Transpose, std::int64_t, std::int64_t, std::int64_t, double, const double*,
                             const double*, double, double*, GemmLibrary);

}  // namespace tp::backend::cpu
